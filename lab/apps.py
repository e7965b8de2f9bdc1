from django.apps import AppConfig


class LabConfig(AppConfig):
    name = "lab"
    verbose_name = "Lab structure"

    def ready(self):
        # Single sign-on (in the portal's foundation) asks for a first sign-in's membership by a signal; adding
        # members is this app's use case.
        from lab.services import members  # imports models: only once they are loaded
        from portal import sso  # reads models: imported once they are loaded

        sso.membership_requested.connect(members.add_on_first_sign_in, dispatch_uid="lab.sso-membership")
