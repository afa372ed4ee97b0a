"""A real LMS for the tests: lti1p3platform's platform (its claims, its RSA key, its signed JWTs, its
token endpoint, its NRPS and AGS services), served over HTTP on a loopback port by a small threaded
server: its JWKS, the OIDC authorization endpoint, the token endpoint, a course's roster, line items
and scores, the deep-linking return URL, and pages that start a launch in a browser, in the page or in an iframe."""

# lti1p3platform ships no type information: its classes are subclassed here as they are.
# mypy: disallow-subclassing-any=False
from __future__ import annotations

import html
import json
import threading
import time
import typing as t
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlencode, urlsplit

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from lti1p3platform.exceptions import LineItemNotFoundException, LtiServiceException  # type: ignore[import-untyped]
from lti1p3platform.lineitem import TLineItem  # type: ignore[import-untyped]
from lti1p3platform.ltiplatform import LTI1P3PlatformConfAbstract  # type: ignore[import-untyped]
from lti1p3platform.membership import Context  # type: ignore[import-untyped]
from lti1p3platform.message_launch import LTIAdvantageMessageLaunchAbstract  # type: ignore[import-untyped]
from lti1p3platform.registration import Registration  # type: ignore[import-untyped]
from lti1p3platform.request import Request, TRequest  # type: ignore[import-untyped]
from lti1p3platform.score import TScore, UpdateScoreStatus  # type: ignore[import-untyped]
from lti1p3platform.service_connector import (  # type: ignore[import-untyped]
    AssignmentsGradesService,
    NamesRoleProvisioningService,
    TPage,
)

LIS = "http://purl.imsglobal.org/vocab/lis/v2/"
INSTRUCTOR = [f"{LIS}membership#Instructor"]
ASSISTANT = [f"{LIS}membership/Instructor#TeachingAssistant"]
LEARNER = [f"{LIS}membership#Learner"]
CLAIM = "https://purl.imsglobal.org/spec/lti/claim/"


def private_key_pem() -> str:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()


def public_key_pem(private_pem: str) -> str:
    key = serialization.load_pem_private_key(private_pem.encode(), password=None)
    return (
        key.public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        .decode()
    )


class PlatformConf(LTI1P3PlatformConfAbstract):
    def init_platform_config(self, **kwargs: t.Any) -> None:
        self._registration = kwargs["registration"]

    def get_registration_by_params(self, **kwargs: t.Any) -> Registration:
        return self._registration


class _Launcher(LTIAdvantageMessageLaunchAbstract):
    """The claims of one launch, answering the tool's authorization request (its preflight)."""

    def __init__(self, preflight: dict[str, t.Any], conf: PlatformConf) -> None:
        super().__init__(t.cast(Request, None), conf)
        self._preflight = preflight
        self._registration = conf.get_registration()

    def get_preflight_response(self) -> dict[str, t.Any]:
        return self._preflight

    def render_launch_form(self, launch_data: dict[str, t.Any], **kwargs: t.Any) -> t.Any:
        return launch_data


class _Req(Request):
    def build_metadata(self, request: t.Any) -> TRequest:
        return request


@dataclass
class Person:
    sub: str
    roles: list[str]
    name: str = ""
    given_name: str = ""
    family_name: str = ""


@dataclass
class Message:
    """A launch the LMS will make when the tool's authorization request names it (the hint)."""

    person: Person
    context_id: str
    context_title: str = "Intro to Programming"
    resource_link_id: str | None = None
    deep_link: bool = False
    custom: dict[str, str] = field(default_factory=dict)
    deployment_id: str | None = None
    expires_in: int = 300
    sign_with: str | None = None  # another private key, under the platform's kid: a bad signature
    change: t.Callable[[dict[str, t.Any]], None] | None = None  # edits the claims before signing


class LoopbackPlatform:
    def __init__(self, *, tool_base: str = "http://testserver", client_id: str = "cordon-client-1",
                 deployment_id: str = "deployment-1") -> None:  # fmt: skip
        self.private_key = private_key_pem()
        self.client_id = client_id
        self.deployment_id = deployment_id
        self.tool_base = tool_base
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.server.platform = self  # type: ignore[attr-defined]
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.issuer = self.base
        self.registration = (
            Registration()
            .set_iss(self.issuer)
            .set_client_id(client_id)
            .set_deployment_id(deployment_id)
            .set_platform_private_key(self.private_key)
            .set_platform_public_key(public_key_pem(self.private_key))
            .set_oidc_login_url(f"{tool_base}/lti/login/")
            .set_launch_url(f"{tool_base}/lti/launch/")
            .set_deeplink_launch_url(f"{tool_base}/lti/launch/")
            .set_tool_key_set_url(f"{tool_base}/lti/jwks/")
        )
        self.conf = PlatformConf(registration=self.registration)
        self.kid = self.registration.get_kid()
        self.messages: dict[str, Message] = {}
        self.members: dict[str, list[dict[str, t.Any]]] = {}  # context id -> NRPS members
        self.line_items: dict[str, TLineItem] = {}
        self.scores: list[dict[str, t.Any]] = []
        self.deep_links: list[list[dict[str, t.Any]]] = []
        self.last_placed = ""  # the resource link id the LMS gave the last deep-linked item
        self.fail_scores = 0  # answer 500 to this many score posts
        self.score_posts = 0
        self.requests: list[tuple[str, str]] = []
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> LoopbackPlatform:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    # --- what staff paste into Cordon's console -------------------------------------------------

    def platform_fields(self) -> dict[str, str]:
        return {
            "name": "Loopback LMS", "issuer": self.issuer, "client_id": self.client_id,
            "deployment_ids": self.deployment_id, "keyset_url": f"{self.base}/jwks",
            "auth_login_url": f"{self.base}/auth", "auth_token_url": f"{self.base}/token",
        }  # fmt: skip

    def trust_tool_keys(self, jwks: dict[str, t.Any]) -> None:
        """The tool's keyset as fetched from its JWKS URL (the test client's answer, where no server runs)."""
        self.registration.set_tool_key_set(jwks)

    # --- launches ---------------------------------------------------------------------------------

    def add(self, message: Message) -> str:
        hint = uuid.uuid4().hex
        self.messages[hint] = message
        return hint

    def login_form(self, hint: str, **overrides: str) -> dict[str, str]:
        """What the LMS sends to the tool's OIDC login URL (third-party initiated login)."""
        message = self.messages[hint]
        form = {
            "iss": self.issuer, "login_hint": message.person.sub, "lti_message_hint": hint,
            "target_link_uri": f"{self.tool_base}/lti/launch/", "client_id": self.client_id,
            "lti_deployment_id": message.deployment_id or self.deployment_id,
        }  # fmt: skip
        form.update(overrides)
        return form

    def authorize(self, query: dict[str, str]) -> dict[str, str]:
        """The OIDC authorization endpoint: the launch's id_token and state, for the redirect URI."""
        message = self.messages[query["lti_message_hint"]]
        launcher = _Launcher(query, self.conf)
        launcher.validate_preflight_response(query)
        person = message.person
        launcher.set_user_data(person.sub, person.roles, full_name=person.name or None)
        launcher.set_launch_context_claim(message.context_id, context_title=message.context_title,
                                          context_types=[f"{LIS}course#CourseOffering"])  # fmt: skip
        launcher.set_nrps(f"{self.base}/nrps/{message.context_id}")
        launcher.set_ags(f"{self.base}/lineitems", None)
        if message.custom:
            launcher.set_custom_parameters_claim(dict(message.custom))
        if message.resource_link_id:
            launcher.set_resource_link_claim(message.resource_link_id, title="Cordon assignment")
            item = self._line_item_of(message.resource_link_id)
            if item is not None:
                launcher.set_ags(f"{self.base}/lineitems", item["id"])
        if message.deep_link:
            launcher.set_dl(f"{self.base}/deep-link-return", title="Add a Cordon assignment")
        claims, state = launcher.get_launch_data()
        if message.deep_link:
            claims[CLAIM + "message_type"] = "LtiDeepLinkingRequest"
            claims.update(launcher._deep_linking_launch_data or {})
            claims.pop(CLAIM + "resource_link", None)
        claims.update({"given_name": person.given_name, "family_name": person.family_name})
        claims[CLAIM + "deployment_id"] = message.deployment_id or self.deployment_id
        if message.change:
            message.change(claims)
        key = message.sign_with or self.private_key
        id_token = Registration.encode_and_sign(claims, key, headers={"kid": self.kid}, expiration=message.expires_in)
        return {"id_token": id_token, "state": state, "url": query["redirect_uri"]}

    def _line_item_of(self, resource_link_id: str) -> TLineItem | None:
        """The column made for a deep-linked resource link (the LMS makes it from the deep link)."""
        return next((i for i in self.line_items.values() if i.get("resourceLinkId") == resource_link_id), None)

    def receive_deep_link(self, jwt_value: str) -> list[dict[str, t.Any]]:
        """The deep-linking answer, checked against the tool's published keys; its content items kept,
        and a column made for each line item, as an LMS does when it places the link."""
        items = self.conf.validate_deeplinking_resp({"JWT": jwt_value})
        self.deep_links.append(items)
        resource_link_id = self.last_placed = f"rl-{len(self.deep_links)}"
        for item in items:
            if item.get("lineItem"):
                line_id = f"{self.base}/lineitems/{uuid.uuid4().hex[:8]}"
                self.line_items[line_id] = {**item["lineItem"], "id": line_id, "resourceLinkId": resource_link_id}
        return items

    def placed_custom(self) -> dict[str, str]:
        """The custom parameters of the last deep-linked item: every launch of that link carries them."""
        return dict(self.deep_links[-1][0].get("custom") or {})


class _Grades(AssignmentsGradesService):
    def __init__(self, request: Request, platform: LoopbackPlatform, line_item: str | None = None) -> None:
        super().__init__(request, platform.conf, f"{platform.base}/lineitems", line_item)
        self.platform = platform

    def find_lineitems(self, page: int = 1, limit: int | None = None, **kwargs: t.Any) -> TPage:
        return {"content": list(self.platform.line_items.values()), "has_next": False}

    def find_lineitem(self, line_item_id: str) -> TLineItem:
        if line_item_id not in self.platform.line_items:
            raise LineItemNotFoundException()
        return self.platform.line_items[line_item_id]

    def create_lineitem(self, creation_data: TLineItem) -> TLineItem:
        line_id = f"{self.platform.base}/lineitems/{uuid.uuid4().hex[:8]}"
        self.platform.line_items[line_id] = {**creation_data, "id": line_id}
        return self.platform.line_items[line_id]

    def update_lineitem(self, update_data: TLineItem) -> TLineItem:
        raise NotImplementedError

    def delete_lineitem(self, line_item_id: str) -> None:
        raise NotImplementedError

    def update_score(self, line_item_id: str, score: TScore) -> UpdateScoreStatus:
        if line_item_id not in self.platform.line_items:
            raise LineItemNotFoundException()
        self.platform.scores.append({**score, "lineItem": line_item_id})
        return UpdateScoreStatus.SUCCESS

    def get_results(self, line_item_id: str, page: int = 1, limit: int | None = None,
                    user_id: str | None = None) -> TPage:  # fmt: skip
        return {"content": [], "has_next": False}


class _Roster(NamesRoleProvisioningService):
    def __init__(self, request: Request, platform: LoopbackPlatform, context_id: str) -> None:
        super().__init__(request, platform.conf, f"{platform.base}/nrps/{context_id}")
        self.platform, self.context_id = platform, context_id

    def get_member_data_page(self, page: int = 1, limit: int | None = None, role: str | None = None,
                             since: str | None = None) -> TPage:  # fmt: skip
        return {"content": [dict(m) for m in self.platform.members.get(self.context_id, [])], "has_next": False}

    def get_context_by_id(self) -> Context:
        return Context(id=self.context_id, label="INTRO", title="Intro to Programming")


class _Handler(BaseHTTPRequestHandler):
    server: ThreadingHTTPServer

    def log_message(self, format: str, *args: t.Any) -> None:
        pass

    @property
    def platform(self) -> LoopbackPlatform:
        return self.server.platform  # type: ignore[attr-defined]

    def _answer(self, status: int, body: t.Any, content_type: str = "application/json") -> None:
        data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _request(self, method: str) -> tuple[str, dict[str, str], TRequest]:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        content_type = self.headers.get("Content-Type") or ""
        form = dict(parse_qsl(raw.decode())) if "form" in content_type else {}
        body = json.loads(raw) if raw and "json" in content_type else None
        query = dict(parse_qsl(parts.query))
        request: TRequest = {"method": method, "form_data": form, "get_data": dict(query), "headers": self.headers,
                             "content_type": content_type, "path": parts.path, "json": body}  # fmt: skip
        self.platform.requests.append((method, parts.path))
        return parts.path, query, request

    def do_GET(self) -> None:
        path, query, request = self._request("GET")
        if path == "/jwks":
            self._answer(200, self.platform.conf.get_jwks())
        elif path == "/favicon.ico":
            self._answer(200, "<svg xmlns='http://www.w3.org/2000/svg'/>", "image/svg+xml")
        elif path == "/auth":
            launch = self.platform.authorize(query)
            self._answer(200, _auto_form(launch["url"], {"id_token": launch["id_token"], "state": launch["state"]}),
                         "text/html")  # fmt: skip
        elif path.startswith("/start/"):
            hint = path.rsplit("/", 1)[1]
            form = self.platform.login_form(hint)
            self._answer(200, _auto_form(f"{self.platform.tool_base}/lti/login/", form), "text/html")
        elif path.startswith("/frame/"):  # the launch in an iframe of an LMS page, as Canvas's and Moodle's pickers
            hint = html.escape(path.rsplit("/", 1)[1])
            self._answer(200, "<!doctype html><title>LMS</title><h1>Select content</h1>"
                         f'<iframe id="tool" src="/start/{hint}" style="width:100%;height:600px"></iframe>',
                         "text/html")  # fmt: skip
        elif path.startswith("/nrps/"):
            self._service(_Roster(_Req(request), self.platform, path.rsplit("/", 1)[1]).handle_get_members)
        elif path == "/lineitems":
            self._service(_Grades(_Req(request), self.platform).handle_get_lineitems)
        else:
            self._answer(404, {"error": "not found"})

    def do_POST(self) -> None:
        path, _query, request = self._request("POST")
        if path == "/token":
            try:
                self._answer(200, self.platform.conf.get_access_token(request["form_data"]))
            except Exception as exc:  # a refused assertion: OAuth's invalid_client
                self._answer(401, {"error": "invalid_client", "error_description": str(exc)})
        elif path == "/lineitems":
            self._service(_Grades(_Req(request), self.platform).handle_create_lineitem)
        elif path.startswith("/lineitems/") and path.endswith("/scores"):
            self.platform.score_posts += 1
            if self.platform.fail_scores > 0:
                self.platform.fail_scores -= 1
                self._answer(500, {"error": "the gradebook is down"})
                return
            line_id = f"{self.platform.base}{path[: -len('/scores')]}"
            service = _Grades(_Req(request), self.platform, line_id)
            self._service(lambda: service.handle_update_score(line_id))
        elif path == "/deep-link-return":
            form = request["form_data"]
            items = self.platform.receive_deep_link(form["JWT"])
            titles = ", ".join(html.escape(str(i.get("title"))) for i in items)
            self._answer(200, f"<!doctype html><title>LMS</title><h1 id='received'>Added: {titles}</h1>", "text/html")
        else:
            self._answer(404, {"error": "not found"})

    def _service(self, handler: t.Callable[[], t.Any]) -> None:
        try:
            response = handler()
        except LtiServiceException as exc:
            self._answer(exc.status_code, {"error": exc.message})
            return
        result = response.result
        if isinstance(result, dict) and "content" in result:
            result = result["content"]
        self._answer(response.code, result if result is not None else {"status": response.message},
                     response.media_type)  # fmt: skip


def _auto_form(url: str, fields: dict[str, str]) -> str:
    inputs = "".join(
        f'<input type="hidden" name="{html.escape(k)}" value="{html.escape(v)}">' for k, v in fields.items()
    )
    return (
        f'<!doctype html><title>LMS</title><form id="f" method="post" action="{html.escape(url)}">{inputs}</form>'
        '<script>document.getElementById("f").submit()</script>'
    )


def query_of(location: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(location).query))


def now() -> int:
    return int(time.time())


__all__ = ["ASSISTANT", "INSTRUCTOR", "LEARNER", "LoopbackPlatform", "Message", "Person", "query_of", "urlencode"]
