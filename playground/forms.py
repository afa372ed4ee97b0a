"""Forms of the account pages: naming a new API token, making an invite link."""

from __future__ import annotations

from django import forms

from playground.services.invites import INVITE_DEFAULT_DAYS, INVITE_MAX_DAYS


class TokenForm(forms.Form):
    name = forms.CharField(max_length=64, required=False, help_text="What it is for, e.g. “laptop” or “CI”.")


class InviteForm(forms.Form):
    note = forms.CharField(max_length=200, required=False, help_text="Whom it is for (shown only to staff).")
    lifetime_days = forms.IntegerField(
        label="Valid for (days)", min_value=1, max_value=INVITE_MAX_DAYS, initial=INVITE_DEFAULT_DAYS
    )
