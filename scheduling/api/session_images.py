"""The lab's session images (/api/v1/session-images): every member lists them; platform admins add, change
(PUT by name) and remove them. Validation here, the use cases in ``scheduling.services.session_images``."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.serializers import StrictSerializer
from portal.tenancy import VIEW, member
from scheduling.api.kinds import READINESS_PATH_RE
from scheduling.api.serializers import IMAGE_RE, MAX_COMMAND_ITEMS
from scheduling.models import SessionImage
from scheduling.models.sessions import SESSION_IMAGE_NAME
from scheduling.services.session_images import session_image_delete, session_image_set


class SessionImageSerializer(serializers.ModelSerializer):
    class Meta:
        model = SessionImage
        fields = ["name", "label", "image", "port", "readiness_path", "command", "description"]
        read_only_fields = fields


class SessionImageWriteSerializer(StrictSerializer):
    label = serializers.CharField(max_length=100, required=False, default="", allow_blank=True)
    image = serializers.CharField(max_length=512)
    port = serializers.IntegerField(min_value=1, max_value=65535)
    readiness_path = serializers.CharField(max_length=200, required=False, default="/")
    command = serializers.ListField(child=serializers.CharField(max_length=8192), required=False, default=list,
                                    max_length=MAX_COMMAND_ITEMS)
    description = serializers.CharField(max_length=300, required=False, default="", allow_blank=True)

    def validate_image(self, value):
        if IMAGE_RE.fullmatch(value) is None:
            raise serializers.ValidationError("Not a valid image reference.", code="invalid_image")
        return value

    def validate_readiness_path(self, value):
        if not READINESS_PATH_RE.match(value):
            raise serializers.ValidationError("A path starting with '/', without spaces.", code="invalid_path")
        return value


class SessionImageListView(APIView):
    @extend_schema(responses=SessionImageSerializer(many=True), summary="The lab's session images")
    def get(self, request):
        member(request.user)
        return Response(SessionImageSerializer(SessionImage.objects.restrict(request.user, VIEW), many=True).data)


class SessionImageDetailView(APIView):
    @extend_schema(request=SessionImageWriteSerializer, responses=SessionImageSerializer,
                   summary="Add or change a session image (platform admins)")
    def put(self, request, name):
        member(request.user)
        if not SESSION_IMAGE_NAME.match(name):
            raise serializers.ValidationError({"name": ["Lower-case letters, digits and '-', up to 63."]})
        serializer = SessionImageWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        found = session_image_set(actor=request.user, name=name, **serializer.validated_data)
        return Response(SessionImageSerializer(found).data)

    @extend_schema(request=None, responses={204: None}, summary="Remove a session image (platform admins)")
    def delete(self, request, name):
        member(request.user)
        session_image_delete(actor=request.user, name=name)
        return Response(status=204)
