"""LTI 1.3 Advantage: Cordon as a tool an LMS (Canvas, Moodle, Blackboard, Brightspace) launches."""
