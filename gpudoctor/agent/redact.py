"""Redaction of secrets in argv, environment values and free text.

Standard library only: the agent imports it inside the workload, and the
supervisor and renderers import it as ``gpudoctor.agent.redact``.
Secrets are recognised by name (``--api-key X``, ``TOKEN=...``) and by value
pattern (well-known token formats, credentials inside URLs).
"""

from __future__ import annotations

import os
import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import overload

MASK = "***"

_SECRET_WORDS = (
    r"password|passwd|passphrase|pass|pwd|pw|secret|token|apikey|api[-_]?key|access[-_]?key|"
    r"private[-_]?key|secret[-_]?key|credentials?|auth|cookie|signature|bearer|sas"
)
# a secret word as a whole segment of a name: HF_TOKEN, --api-key, db.password (not "tokenizer")
_SECRET_NAME = re.compile(r"(?:^|[-_.])(?:" + _SECRET_WORDS + r")(?:$|[-_.])", re.IGNORECASE)
# names that hold a secret word but never a secret: the shell's working directories (PWD is
# "print working directory", not a password; masking it hid every path of the run)
_NOT_SECRET_NAMES = frozenset({"PWD", "OLDPWD"})
# flags whose value is a key, though `key` alone in a name is no secret (SORT_KEY, --key-column)
_SECRET_FLAG_NAMES = frozenset({"key"})
# A value that looks like a credential whatever its name says.
_SECRET_VALUE = re.compile(
    r"(gh[pousr]_[A-Za-z0-9]{20,}"  # GitHub tokens
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|hf_[A-Za-z0-9]{20,}"  # Hugging Face
    r"|sk-[A-Za-z0-9_\-]{16,}"  # OpenAI-style keys
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}"  # Slack
    r"|AKIA[0-9A-Z]{16}"  # AWS access key id
    r"|AIza[0-9A-Za-z_\-]{35}"  # Google API key
    r"|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"  # JWT
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$))"
)
# scheme://user:password@host -> scheme://user:***@host
_URL_CREDENTIALS = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://[^/\s:@]*):([^/\s@]*)@")
# key=value inside text or a query string
_KEY_VALUE = re.compile(
    r"(?P<key>(?<![A-Za-z0-9])(?:[A-Za-z0-9]+[-_.])*(?:" + _SECRET_WORDS + r")(?:[-_.][A-Za-z0-9]+)*)"
    r"(?P<sep>\s*[=:]\s*)(?P<val>[^\s&;,'\"]+)",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(?i)(bearer|basic)\s+[A-Za-z0-9+/=._\-]{8,}")
# `--api-key VALUE` inside free text (a command line quoted in a traceback or a log
# line): redact_argv sees such pairs as two arguments, text has only the space
_FLAG_VALUE = re.compile(r"(?P<flag>(?<!\S)--?[A-Za-z0-9][A-Za-z0-9_.\-]*)(?P<sep>[ \t]+)(?P<val>[^\s\-][^\s'\"]*)")


# `-p VALUE` / `-P VALUE`: the password flags of mysql, sshpass, psql-style tools and many
# scripts. A port or a pytest plugin given so is masked too: a harmless loss in a report
SHORT_SECRET_FLAGS = ("-p", "-P")
# an environment value shorter than this is not masked by value ("1", "true", "dev")
MIN_ENV_SECRET_LEN = 6


def is_secret_name(name: str) -> bool:
    return name not in _NOT_SECRET_NAMES and bool(_SECRET_NAME.search(name or ""))


def is_secret_flag(flag: str) -> bool:
    """`--token`, `--key`, `-p`: a flag whose value is a secret."""
    name = flag.lstrip("-")
    return flag in SHORT_SECRET_FLAGS or name.lower() in _SECRET_FLAG_NAMES or is_secret_name(name)


def env_secrets(environ: Mapping[str, str]) -> list[str]:
    """Values of the environment variables whose names say they are secrets (HF_TOKEN,
    DB_PASSWORD): they may turn up anywhere, e.g. in an exception's message."""
    values: set[str] = set()
    try:
        for key, value in environ.items():
            if isinstance(value, str) and len(value) >= MIN_ENV_SECRET_LEN and is_secret_name(key):
                values.add(value)
    except Exception:  # noqa: BLE001 (an odd environment mapping yields no secrets)
        pass
    return sorted(values, key=len, reverse=True)


if TYPE_CHECKING:
    @overload
    def redact_text(text: str, secrets: Iterable[str] = ()) -> str: ...
    @overload
    def redact_text(text: None, secrets: Iterable[str] = ()) -> None: ...


def redact_text(text: str | None, secrets: Iterable[str] = ()) -> str | None:
    """Mask secrets found by value pattern, in URLs and in key=value pairs, and the known
    secret values given (see env_secrets)."""
    if not isinstance(text, str) or not text:
        return text
    for value in secrets:
        if value in text:
            text = text.replace(value, MASK)
    text = _URL_CREDENTIALS.sub(lambda m: m.group(1) + ":" + MASK + "@", text)
    text = _SECRET_VALUE.sub(MASK, text)
    text = _BEARER.sub(lambda m: m.group(1) + " " + MASK, text)
    text = _KEY_VALUE.sub(lambda m: m.group("key") + m.group("sep") + MASK, text)
    text = _FLAG_VALUE.sub(_mask_flag_value, text)
    return text


def _mask_flag_value(match: re.Match[str]) -> str:
    if not is_secret_flag(match.group("flag")):
        return match.group(0)
    return match.group("flag") + match.group("sep") + MASK


def redact_argv(argv: Iterable[object], secrets: Iterable[str] = ()) -> list[str]:
    """Mask `--token X`, `--token=X`, `TOKEN=X`, `-p X`, secret-looking values and the known
    secret values given (see env_secrets) in a command line."""
    args = [str(arg) for arg in argv]
    # `python -P train.py`: before its script, the interpreter's own -P (safe path) takes no value
    interpreter_options = bool(args) and os.path.basename(args[0]).startswith("python")
    out: list[str] = []
    mask_next = False
    for index, arg in enumerate(args):
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        if arg.startswith("-") and "=" not in arg:
            mask_next = bool(arg.lstrip("-")) and is_secret_flag(arg) and not (interpreter_options and arg == "-P")
            out.append(arg)
            continue
        interpreter_options = interpreter_options and index == 0
        flag, sep, _ = arg.partition("=")
        out.append(flag + "=" + MASK if sep and flag.startswith("-") and is_secret_flag(flag)
                   else redact_text(arg, secrets))
    return out


def redact_env(env: Mapping[str, str]) -> dict[str, str]:
    """A copy of an environment mapping with secret values masked."""
    clean: dict[str, str] = {}
    for key, value in env.items():
        clean[key] = MASK if is_secret_name(key) else redact_text(value)
    return clean
