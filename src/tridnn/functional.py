"""``tridnn.functional``: the functional API (arrays in, new arrays out); see tridnn.api.functional."""
from .api.functional import *  # noqa: F401,F403
from .api.functional import __all__  # noqa: F401
