import time

from portal.metrics import scheduler_state
from portal.tenancy import membership_of


def membership(request):
    found = membership_of(getattr(request, "user", None))
    context = {"membership": found}
    if found is not None and found.is_platform_admin:
        # the shell's banner: platform admins are the ones who can start the worker or beat again
        state = scheduler_state(now=time.time())
        if state.stalled:
            context["scheduler_stalled"] = state
    return context
