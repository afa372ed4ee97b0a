"""An LMS's roles (LIS role URIs, in a launch or a roster) as a role in a Cordon course: a pure
function whose precedence is written down."""

from __future__ import annotations

from collections.abc import Iterable

from playground.models import Role

_LIS = "http://purl.imsglobal.org/vocab/lis/v2/"
# A teaching assistant's URI is a sub-role of Instructor's ("membership/Instructor#TeachingAssistant"):
# matched whole, never by prefix, so that it never reads as an instructor.
INSTRUCTOR = {
    f"{_LIS}membership#Instructor", f"{_LIS}membership#Administrator", f"{_LIS}institution/person#Administrator",
    f"{_LIS}system/person#Administrator", "Instructor", "Administrator",
}  # fmt: skip
ASSISTANT = {f"{_LIS}membership/Instructor#TeachingAssistant", "TeachingAssistant"}
STUDENT = {f"{_LIS}membership#Learner", "Learner"}


def role_for(roles: Iterable[str]) -> Role | None:
    """Instructor (or an administrator) before teaching assistant before learner: a person with
    several roles gets the highest. None for roles with no place in a course (a mentor, a guest)."""
    given = {str(role).strip() for role in roles}
    if given & INSTRUCTOR:
        return Role.INSTRUCTOR
    if given & ASSISTANT:
        return Role.ASSISTANT
    if given & STUDENT:
        return Role.STUDENT
    return None
