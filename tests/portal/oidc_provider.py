"""A real OpenID provider for the single sign-on tests, built on authlib's authorization server.

authlib does the protocol (client authentication, authorization codes bound to their client and redirect
URI, the ``openid`` scope, nonces, RS256-signed ID tokens with ``at_hash``); this module only stores codes
and tokens in memory and serves it over HTTP from a thread, with a real JWKS. Who signs in is set by the
test (``provider.login_as``), standing in for the provider's own log-in form and the session it keeps; the
test can rename that user (``rename``) or disable them (``disable``: the provider then refuses them, also to a
silent ``prompt=none`` request, which it answers with ``login_required`` like real providers). The
end-session endpoint (RP-initiated logout) checks the ``id_token_hint`` and the registered
``post_logout_redirect_uri``, ends the provider's session and records the call in ``logouts``.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections import defaultdict
from functools import cached_property
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, make_server

from authlib.oauth2 import AuthorizationServer, OAuth2Error
from authlib.oauth2.rfc6749 import (
    AuthorizationCodeMixin,
    ClientMixin,
    JsonPayload,
    JsonRequest,
    OAuth2Payload,
    OAuth2Request,
    grants,
)
from authlib.oidc.core import UserInfo
from authlib.oidc.core.grants import OpenIDCode
from joserfc.jwk import KeySet, RSAKey


class Client(ClientMixin):
    def __init__(self, client_id, secret, redirect_uri, post_logout_redirect_uri=None):
        self.client_id, self.secret, self.redirect_uri = client_id, secret, redirect_uri
        self.post_logout_redirect_uri = post_logout_redirect_uri

    def get_client_id(self):
        return self.client_id

    def get_default_redirect_uri(self):
        return self.redirect_uri

    def get_allowed_scope(self, scope):
        return " ".join(s for s in (scope or "").split() if s in {"openid", "email", "profile", "groups"})

    def check_redirect_uri(self, redirect_uri):
        return redirect_uri == self.redirect_uri

    def check_client_secret(self, client_secret):
        return secrets.compare_digest(client_secret, self.secret)

    def check_endpoint_auth_method(self, method, endpoint):
        return method in ("client_secret_post", "client_secret_basic")

    def check_response_type(self, response_type):
        return response_type == "code"

    def check_grant_type(self, grant_type):
        return grant_type == "authorization_code"


class Code(AuthorizationCodeMixin):
    def __init__(self, code, client_id, redirect_uri, scope, user, nonce):
        self.code, self.client_id, self.redirect_uri, self.scope = code, client_id, redirect_uri, scope
        self.user, self.nonce, self.auth_time = user, nonce, int(time.time())

    def get_redirect_uri(self):
        return self.redirect_uri

    def get_scope(self):
        return self.scope

    def get_nonce(self):
        return self.nonce

    def get_auth_time(self):
        return self.auth_time

    def get_acr(self):
        return None

    def get_amr(self):
        return None


class Payload(OAuth2Payload):
    def __init__(self, values: dict[str, list[str]]):
        self._values = values

    @property
    def data(self):
        return {k: v[0] for k, v in self._values.items()}

    @cached_property
    def datalist(self):
        return defaultdict(list, self._values)


class Request(OAuth2Request):
    def __init__(self, method, uri, headers, values, query, form):
        super().__init__(method=method, uri=uri, headers=headers)
        self.payload = Payload(values)
        self._args, self._form = query, form

    @property
    def args(self):
        return {k: v[0] for k, v in self._args.items()}

    @property
    def form(self):
        return {k: v[0] for k, v in self._form.items()}


class Provider:
    def __init__(self):
        self.key = RSAKey.generate_key(2048, parameters={"kid": "test-key", "use": "sig", "alg": "RS256"})
        self.codes: dict[str, Code] = {}
        self.tokens: dict[str, dict] = {}
        self.clients: dict[str, Client] = {}
        self.user: dict | None = None
        self.published_key = None  # a test may publish another key than the one that signs
        self.issued_id_tokens: list[str] = []
        self.disabled: set[str] = set()  # subjects the provider no longer signs in
        self.logouts: list[dict] = []  # the end-session requests it accepted
        self.userinfo_override: dict = {}  # a test may make userinfo disagree with the ID token
        provider = self

        class Grant(grants.AuthorizationCodeGrant):
            TOKEN_ENDPOINT_AUTH_METHODS = ["client_secret_basic", "client_secret_post"]

            def save_authorization_code(self, code, request):
                provider.codes[code] = Code(code, request.client.client_id, request.payload.redirect_uri,
                                            request.payload.scope, request.user, request.payload.data.get("nonce"))

            def query_authorization_code(self, code, client):
                item = provider.codes.get(code)
                return item if item and item.client_id == client.client_id else None

            def delete_authorization_code(self, authorization_code):
                provider.codes.pop(authorization_code.code, None)

            def authenticate_user(self, authorization_code):
                return authorization_code.user

        class OIDC(OpenIDCode):
            def resolve_client_private_key(self, client):
                return provider.key

            def get_client_claims(self, client):
                return {"iss": provider.url, "aud": [client.client_id]}

            def get_encode_header(self, client):
                return {"alg": "RS256", "kid": "test-key"}

            def exists_nonce(self, nonce, request):
                return any(c.nonce == nonce for c in provider.codes.values())

            def generate_user_info(self, user, scope):
                return UserInfo(**user)

        class Server(AuthorizationServer):
            def query_client(self, client_id):
                return provider.clients.get(client_id)

            def save_token(self, token, request):
                provider.tokens[token["access_token"]] = dict(request.user)

            def create_oauth2_request(self, request):
                return request

            def create_json_request(self, request):
                req = JsonRequest(request.method, request.uri, request.headers)
                req.payload = JsonPayload()
                return req

            def handle_response(self, status, body, headers):
                return status, body, headers

            def send_signal(self, name, *args, **kwargs):
                pass

        self.server = Server()
        self.server.register_grant(Grant, [OIDC(require_nonce=True)])
        self.server.register_token_generator("default", self._token)
        self.httpd = make_server("127.0.0.1", 0, self.wsgi, handler_class=_Quiet)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _token(self, client, grant_type, user=None, scope=None, expires_in=None, include_refresh_token=True):
        return {"token_type": "Bearer", "access_token": secrets.token_urlsafe(24), "expires_in": 3600,
                "scope": scope}

    def register(self, client_id, secret, redirect_uri, post_logout_redirect_uri=None):
        self.clients[client_id] = Client(client_id, secret, redirect_uri, post_logout_redirect_uri)

    def login_as(self, **claims):
        """Who the provider's own log-in form would sign in next (``sub`` and the claims)."""
        self.user = claims

    def rename(self, preferred_username):
        """The signed-in user edits their user name at the provider (their ``sub`` stays)."""
        self.user = {**self.user, "preferred_username": preferred_username}

    def disable(self, sub):
        """An administrator of the provider disables the account: it is signed in no more."""
        self.disabled.add(sub)

    @property
    def signed_in(self) -> dict | None:
        """The user of the provider's session, unless disabled."""
        return self.user if self.user and self.user.get("sub") not in self.disabled else None

    def settings(self) -> dict:
        return {"OIDC_OP_AUTHORIZATION_ENDPOINT": f"{self.url}/authorize",
                "OIDC_OP_TOKEN_ENDPOINT": f"{self.url}/token",
                "OIDC_OP_USER_ENDPOINT": f"{self.url}/userinfo",
                "OIDC_OP_JWKS_ENDPOINT": f"{self.url}/jwks",
                "OIDC_OP_ISSUER": self.url,
                "OIDC_OP_LOGOUT_ENDPOINT": f"{self.url}/end_session"}

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()

    # ------------------------------------------------------------------ HTTP
    def wsgi(self, environ, start_response):
        path = environ["PATH_INFO"]
        query = parse_qs(environ.get("QUERY_STRING", ""))
        body = b""
        if environ["REQUEST_METHOD"] == "POST":
            body = environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
        form = parse_qs(body.decode())
        values = {**query, **form}
        headers = {k[5:].replace("_", "-").title(): v for k, v in environ.items() if k.startswith("HTTP_")}
        if environ.get("CONTENT_TYPE"):
            headers["Content-Type"] = environ["CONTENT_TYPE"]
        uri = f"{self.url}{path}?{environ.get('QUERY_STRING', '')}"
        request = Request(environ["REQUEST_METHOD"], uri, headers, values, query, form)
        if path == "/.well-known/openid-configuration":
            return _json(start_response, 200, {
                "issuer": self.url, "authorization_endpoint": f"{self.url}/authorize",
                "token_endpoint": f"{self.url}/token", "userinfo_endpoint": f"{self.url}/userinfo",
                "jwks_uri": f"{self.url}/jwks", "end_session_endpoint": f"{self.url}/end_session",
                "response_types_supported": ["code"],
                "id_token_signing_alg_values_supported": ["RS256"], "subject_types_supported": ["public"]})
        if path == "/jwks":
            return _json(start_response, 200, KeySet([self.published_key or self.key]).as_dict(private=False))
        if path == "/authorize":
            user = self.signed_in
            if user is None and query.get("prompt") != ["none"]:
                return _json(start_response, 401, {"error": "login_required"})  # the log-in form refuses
            try:  # the consent step: validates the client, redirect URI, scope, nonce and prompt=none
                grant = self.server.get_consent_grant(request=request, end_user=user)
            except OAuth2Error as error:  # prompt=none without a user: back to the client with login_required
                return _respond(start_response, *self.server.handle_error_response(request, error))
            status, payload, hdrs = self.server.create_authorization_response(request, grant_user=user,
                                                                              grant=grant)
            return _respond(start_response, status, payload, hdrs)
        if path == "/token":
            status, payload, hdrs = self.server.create_token_response(request)
            if isinstance(payload, dict) and "id_token" in payload:
                self.issued_id_tokens.append(payload["id_token"])
            return _respond(start_response, status, payload, hdrs)
        if path == "/userinfo":
            token = headers.get("Authorization", "").removeprefix("Bearer ").strip()
            user = self.tokens.get(token)
            if user is None:
                return _json(start_response, 401, {"error": "invalid_token"})
            return _json(start_response, 200, {**user, **self.userinfo_override})
        if path == "/end_session":
            return self._end_session(start_response, {k: v[0] for k, v in values.items()})
        return _json(start_response, 404, {"error": "not_found"})

    def _end_session(self, start_response, params):
        """RP-initiated logout: a hint it issued, to a registered post-logout URI; the session ends."""
        hint, back = params.get("id_token_hint"), params.get("post_logout_redirect_uri")
        client = self.clients.get(params.get("client_id", ""))
        if hint not in self.issued_id_tokens or client is None or (back and back != client.post_logout_redirect_uri):
            return _json(start_response, 400, {"error": "invalid_request"})
        self.logouts.append(params)
        self.user = None
        if not back:
            return _json(start_response, 200, {"logged_out": True})
        start_response("302 Found", [("Location", back), ("Content-Length", "0")])
        return [b""]


class _Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


def _json(start_response, status, data):
    body = json.dumps(data).encode()
    start_response(f"{status} X", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
    return [body]


def _respond(start_response, status, payload, headers):
    body = payload if isinstance(payload, bytes) else (
        json.dumps(payload).encode() if isinstance(payload, dict | list) else str(payload or "").encode())
    start_response(f"{status} X", [(k, v) for k, v in headers] + [("Content-Length", str(len(body)))])
    return [body]
