"""Number formats, rounding and the state-spec grammar (DESIGN.md sec. 4, 5)."""

from .spec import StateSpec, parse_state_spec, VALID_FORMS  # noqa: F401
