"""A real OpenID Provider on loopback for the single sign-on tests (provider.mjs: panva's certified
oidc-provider, run by Node from playground/frontend's node_modules), and a person using it: their
browser at the provider is a requests session, which stops where the provider sends it back to Cordon."""

from __future__ import annotations

import json
import re
import select
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

import pytest
import requests

from runner.config import PROJECT_ROOT

SCRIPT = Path(__file__).with_name("provider.mjs")
FRONTEND = PROJECT_ROOT / "playground" / "frontend"
SITE = "http://testserver"  # the Django test client's origin: the redirect URI registered here
REDIRECT_URI = f"{SITE}/accounts/oidc/callback/"
POST_LOGOUT_URI = f"{SITE}/accounts/login/"  # where the provider's end-session sends the browser back
SECRET = "a-client-secret-of-the-tests"


def client(client_id: str, **extra: Any) -> dict[str, Any]:
    return {"client_id": client_id, "client_secret": SECRET, "redirect_uris": [REDIRECT_URI],
            "post_logout_redirect_uris": [POST_LOGOUT_URI], "token_endpoint_auth_method": "client_secret_post",
            **extra}  # fmt: skip


class LoopbackProvider:
    def __init__(self, workdir: Path, clients: list[dict[str, Any]], *, mix_up: bool = False, logout: bool = True):
        self.accounts_file = workdir / "accounts.json"
        self.clients = clients
        self.mix_up = mix_up
        self.logout = logout  # RP-initiated logout (an end_session_endpoint) offered
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""  # where it answers, and the issuer its discovery document names
        self.issuer = ""  # the issuer its tokens carry (another one when mixing up)
        self.logins_asked = 0  # how many times its login form was shown

    def __enter__(self) -> LoopbackProvider:
        node = shutil.which("node")
        if node is None or not (FRONTEND / "node_modules" / "oidc-provider").is_dir():
            pytest.fail(
                "the SSO tests need Node and oidc-provider: `make test` installs them (npm ci in playground/frontend)"
            )
        self.accounts_file.write_text("{}")
        options = {"modules": str(FRONTEND / "package.json"), "accounts": str(self.accounts_file),
                   "clients": self.clients, "mixUp": self.mix_up, "logout": self.logout}  # fmt: skip
        self.proc = subprocess.Popen(
            [node, str(SCRIPT), json.dumps(options)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            self.__exit__()
            raise RuntimeError("the OpenID Provider did not start")
        started = json.loads(line)
        self.url, self.issuer = started["url"], started["issuer"]
        return self

    def __exit__(self, *_: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def set_account(self, account_id: str, **claims: Any) -> None:
        """Add or change a person (their claims: email, preferred_username, groups...)."""
        accounts = json.loads(self.accounts_file.read_text())
        accounts[account_id] = claims
        self.accounts_file.write_text(json.dumps(accounts))

    def authorize(self, authorization_url: str, account_id: str, browser: requests.Session | None = None) -> str:
        """A person's browser at the provider (a new one, or `browser` with the provider's cookies of
        earlier visits): logs in as `account_id` if asked to (consent is implied) and returns the URL
        the provider sends it back to (Cordon's redirect URI with code and state)."""
        browser = browser or requests.Session()
        url, form = authorization_url, None
        for _ in range(10):
            if form is None:
                answer = browser.get(url, allow_redirects=False, timeout=10)
            else:
                answer = browser.post(url, data=form, allow_redirects=False, timeout=10)
            form = None
            if answer.is_redirect:
                url = urljoin(url, answer.headers["Location"])
                if url.startswith(SITE):
                    return url
                continue
            found = re.search(r'<form method="post" action="([^"]+)">', answer.text)
            if answer.status_code != 200 or found is None:
                raise AssertionError(f"the provider answered {answer.status_code}: {answer.text[:500]}")
            url, form = urljoin(url, found.group(1)), {"login": account_id}
            self.logins_asked += 1
        raise AssertionError("the provider never sent the browser back")

    def end_session(self, url: str, browser: requests.Session) -> str:
        """A person's browser at the provider's end-session page: says "Yes, sign me out" and returns
        where the provider then sends it (the post-logout redirect URI)."""
        page = browser.get(url, allow_redirects=False, timeout=10)
        form = re.search(r'<form id="op.logoutForm" method="post" action="([^"]+)">'
                         r'<input type="hidden" name="xsrf" value="([^"]+)"/>', page.text)  # fmt: skip
        if page.status_code != 200 or form is None:
            raise AssertionError(f"the provider's end-session answered {page.status_code}: {page.text[:500]}")
        done = browser.post(urljoin(url, form.group(1)), data={"xsrf": form.group(2), "logout": "yes"},
                            allow_redirects=False, timeout=10)  # fmt: skip
        if not done.is_redirect:
            raise AssertionError(f"the provider did not send the browser back: {done.status_code} {done.text[:500]}")
        return urljoin(url, done.headers["Location"])
