"""What the classroom tells whoever listens (the LTI app sends scores to an LMS), without importing
them: the classroom never imports its listeners."""

from django.dispatch import Signal

# Sent once a submission's final score is settled or changed: graded, graded again, or adjusted by
# hand. Keyword argument: submission (a Submission). Sent after the change is committed.
score_changed = Signal()
