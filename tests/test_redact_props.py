"""Property tests: secrets put in a command line never reach a rendered report, and no
string from a run can break out of the HTML it is rendered into.

Secrets are recognised by name (`--api-key X`, `--token=X`, `PASSWORD=X`) and by value
(well-known token formats, credentials inside URLs); gpudoctor.agent.redact masks them
at the source, and the report builder and renderers mask again (reports get attached
to tickets).
"""

from __future__ import annotations

import json
from html.parser import HTMLParser
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudoctor.agent.redact import MASK, redact_argv, redact_text
from gpudoctor.model import CheckOutcome, Finding, Remedy
from gpudoctor.reports import render
from gpudoctor.session import ErrorEvent, ProcessInfo, Session
from gpudoctor.verdict.build import build_report
from gpudoctor.verdict.engine import EngineResult

ALNUM = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
# a credential: distinctive ("Zq" prefix, 16+ characters) so it cannot occur in a report by chance
secret_values = st.text(alphabet=ALNUM + "-_.~", min_size=14, max_size=40).map(lambda s: "Zq" + s)
secret_names = st.sampled_from(["token", "api-key", "api_key", "apikey", "password", "passwd", "secret", "access-key",
                                "secret-key", "private-key", "auth", "hf-token", "wandb-api-key", "db.password",
                                "aws_secret_access_key", "credentials"])


@st.composite
def secret_argument(draw: Any) -> tuple[list[str], str]:
    """(arguments carrying a secret, the secret itself)"""
    name = draw(secret_names)
    value = draw(secret_values)
    alnum = draw(st.text(alphabet=ALNUM, min_size=36, max_size=40))
    form = draw(st.sampled_from(["flag", "flag=", "env", "url", "github", "hf", "openai", "aws", "slack", "jwt"]))
    dashes = draw(st.sampled_from(["-", "--"]))
    if form == "flag":
        return [f"{dashes}{name}", value], value
    if form == "flag=":
        return [f"{dashes}{name}={value}"], value
    if form == "env":
        return [f"{name.upper().replace('-', '_')}={value}"], value
    if form == "url":
        scheme = draw(st.sampled_from(["https", "http", "s3", "postgresql", "redis", "git+https"]))
        return [f"--data={scheme}://user:{value}@host.example/path"], value
    token = {"github": "ghp_" + alnum, "hf": "hf_" + alnum, "openai": "sk-" + alnum, "aws": "AKIA" + alnum.upper()[:16],
             "slack": "xoxb-" + alnum, "jwt": f"eyJ{alnum[:12]}.{alnum[12:24]}.{alnum[24:]}"}[form]
    return [draw(st.sampled_from(["--resume-from", "--data", "--x"])), token], token


benign = st.lists(st.text(alphabet=ALNUM + "/._", min_size=1, max_size=12), max_size=4)


def report_for(argv: list[str], error_text: str = "") -> dict[str, Any]:
    session = Session(
        source="synthetic",
        command=argv,  # deliberately unredacted: the builder and renderers must not rely on the agent
        processes=[ProcessInfo(pid=1, argv=argv)],
        errors=[ErrorEvent(pid=1, kind="exception", type="RuntimeError", message=error_text, traceback=error_text)],
    )
    result = EngineResult(
        findings=[
            Finding("warning", "A finding", "with a message", remedy=Remedy("Do this.", "x = 1"), id="GD102", stage=1)
        ],
        outcomes=[CheckOutcome("GD102", "input-stall", 1, "Input pipeline stall", "finding")],
    )
    return build_report(session, result, docs={})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(secret=secret_argument(), before=benign, after=benign)
def test_redact_argv_masks_every_form(secret: tuple[list[str], str], before: list[str], after: list[str]) -> None:
    args, value = secret
    redacted = redact_argv(["python", "train.py", *before, *args, *after])
    assert value not in " ".join(redacted)
    assert any(MASK in a for a in redacted)
    assert redact_argv(redacted) == redacted  # masking twice changes nothing


@settings(max_examples=150, deadline=None)
@given(secret=secret_argument(), before=benign)
def test_redact_text_masks_a_quoted_command_line(secret: tuple[list[str], str], before: list[str]) -> None:
    args, value = secret
    text = "Traceback: while running python train.py " + " ".join([*before, *args]) + "\nValueError: bad"
    assert value not in redact_text(text)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(secret=secret_argument(), before=benign, after=benign)
def test_secrets_never_reach_a_rendered_report(
    secret: tuple[list[str], str], before: list[str], after: list[str]
) -> None:
    args, value = secret
    argv = ["python", "train.py", *before, *args, *after]
    report = report_for(argv, error_text="failed: python train.py " + " ".join(args))
    for fmt in ("json", "markdown", "junit", "terminal", "html"):
        assert value not in render(report, fmt), fmt
    assert value not in json.dumps(report)


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))


hostile_text = st.one_of(
    st.text(max_size=60),
    st.sampled_from(
        [
            "<script>alert(1)</script>",
            '"><img src=x onerror=alert(1)>',
            "</code></pre><script>x</script>",
            "<!--",
            "]]>",
            "{{ 7*7 }}",
            "javascript:alert(1)",
            "<svg/onload=alert(1)>",
            "&lt;b&gt;",
            "\x00\x1b[31m",
        ]
    ),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pieces=st.lists(hostile_text, min_size=1, max_size=4))
def test_hostile_strings_never_escape_their_text(pieces: list[str]) -> None:
    argv = ["python", "train.py", *pieces]
    report = report_for(argv, error_text=" ".join(pieces))
    report["findings"][0]["title"] = " ".join(pieces)
    report["checks"].append({"id": "GD104", "status": "skipped", "reason": "".join(pieces)})
    page = render(report, "html")
    parser = _Tags()
    parser.feed(page)
    names = [tag for tag, _ in parser.tags]
    assert names.count("script") == 1 and "img" not in names and "iframe" not in names
    assert all(not name.startswith("on") for _, attrs in parser.tags for name, _ in attrs)
    assert all("://" not in (value or "") for _, attrs in parser.tags for _, value in attrs)
    json.loads(render(report, "json"))  # still valid JSON
    for fmt in ("markdown", "junit", "terminal"):
        render(report, fmt)  # and every other format still renders
