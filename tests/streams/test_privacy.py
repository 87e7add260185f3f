"""Privacy at the source: secret redaction of code text, privacy mode, keyed pseudonyms.

Planted secrets are generated at run time (random, seeded) and assembled from pieces, so this
file holds no token in a vendor's real format (what push-protection scanners match).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import random
import re
import string
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from ground.errors import FlywheelError
from streams import redaction
from streams.errors import PrivacyError
from streams.privacy import Pseudonymizer, Redaction, apply_privacy, redact_secrets

ALNUM = string.ascii_letters + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
B64 = ALNUM + "+/"


def rand(rng: random.Random, alphabet: str, n: int) -> str:
    """Random text that mixes digits and letters (if the alphabet has both), as tokens do."""
    classes = [test for test in (str.isdigit, str.isalpha) if any(map(test, alphabet))]
    while True:
        out = "".join(rng.choice(alphabet) for _ in range(n))
        if all(any(map(test, out)) for test in classes):
            return out


def pem_body(rng: random.Random, lines: int = 4) -> str:
    return "\n".join(rand(rng, B64, 64) for _ in range(lines))


def pem(rng: random.Random, label: str = "RSA ") -> tuple[str, str]:
    body = pem_body(rng)
    dashes = "-" * 5
    block = (
        f"{dashes}BEGIN {label}PRIVATE KEY{dashes}\n{body}\n{dashes}END {label}PRIVATE KEY{dashes}"
    )
    return block, body


def jwt(rng: random.Random) -> str:
    def part(obj: str) -> str:
        return base64.urlsafe_b64encode(obj.encode()).decode().rstrip("=")

    header, claims = part('{"alg":"HS256","typ":"JWT"}'), part('{"sub":"42"}')
    return f"{header}.{claims}.{rand(rng, ALNUM + '-_', 43)}"


# (name, secret factory, snippet with `{s}` where the secret goes, text that must survive,
#  the finding expected). The factories take the seeded Random.
Factory = Callable[[random.Random], str]


@dataclass(frozen=True)
class Plant:
    name: str
    secret: Factory
    snippet: str
    survives: str
    kind: str | None = None


def aws_id(r: random.Random) -> str:
    return "AKIA" + rand(r, UPPER_DIGITS, 16)


def aws_secret(r: random.Random) -> str:
    return rand(r, B64, 40)


def github(r: random.Random) -> str:
    return "gh" + "p_" + rand(r, ALNUM, 36)


def github_pat(r: random.Random) -> str:
    return "github" + "_pat_" + rand(r, ALNUM + "_", 82)


def gitlab(r: random.Random) -> str:
    return "gl" + "pat-" + rand(r, ALNUM + "_-", 20)


def slack(r: random.Random) -> str:
    return "xo" + "xb-" + rand(r, string.digits, 12) + "-" + rand(r, ALNUM, 24)


def stripe(r: random.Random) -> str:
    return "sk" + "_live_" + rand(r, ALNUM, 24)


def google(r: random.Random) -> str:
    return "AI" + "za" + rand(r, ALNUM + "_-", 35)


def openai(r: random.Random) -> str:
    return "sk" + "-proj-" + rand(r, ALNUM + "_-", 48)


def anthropic(r: random.Random) -> str:
    return "sk" + "-ant-api03-" + rand(r, ALNUM + "_-", 60)


def password(r: random.Random) -> str:
    return rand(r, ALNUM + "!#%&*", 14)


def twilio(r: random.Random) -> str:
    return "A" + "C" + rand(r, string.ascii_lowercase + string.digits, 32)


def sendgrid(r: random.Random) -> str:
    return "S" + "G." + rand(r, ALNUM, 22) + "." + rand(r, ALNUM, 43)


def slack_webhook(r: random.Random) -> str:
    return f"T0{rand(r, UPPER_DIGITS, 8)}/B0{rand(r, UPPER_DIGITS, 8)}/{rand(r, ALNUM, 24)}"


def high_entropy(r: random.Random) -> str:
    return rand(r, ALNUM, 32)


def pem_key(r: random.Random) -> str:
    return pem(r)[0]


def base64_pem(r: random.Random) -> str:
    return base64.b64encode(pem(r)[0].encode()).decode()


PLANTS = [
    Plant(
        "aws id, python",
        aws_id,
        'aws_access_key_id = "{s}"\nprint(1)\n',
        "print(1)",
        "aws_access_key_id",
    ),
    Plant(
        "aws id in a comment",
        aws_id,
        "# creds: {s} (rotate!)\nx = 1\n",
        "(rotate!)",
        "aws_access_key_id",
    ),
    Plant(
        "aws secret, ini",
        aws_secret,
        "[default]\naws_secret_access_key = {s}\nregion = eu-west-1\n",
        "region = eu-west-1",
        "aws_secret_access_key",
    ),
    Plant(
        "aws secret, boto3",
        aws_secret,
        's3 = boto3.client("s3", aws_secret_access_key="{s}")\n',
        'boto3.client("s3"',
        "aws_secret_access_key",
    ),
    Plant(
        "github, js",
        github,
        'const octokit = new Octokit({{ auth: "{s}" }});\n',
        "new Octokit",
        "github_token",
    ),
    Plant(
        "github pat, shell",
        github_pat,
        'curl -H "Authorization: token {s}" https://api.github.com/user\n',
        "https://api.github.com/user",
        "github_token",
    ),
    Plant(
        "gitlab, python",
        gitlab,
        'gl = gitlab.Gitlab("https://gitlab.com", private_token="{s}")\n',
        "gitlab.Gitlab(",
        "gitlab_token",
    ),
    Plant(
        "slack, comment", slack, "# bot {s} posts to #alerts\n", "posts to #alerts", "slack_token"
    ),
    Plant(
        "slack webhook, js",
        slack_webhook,
        'await fetch("https://hooks.slack.com/services/{s}", opts);\n',
        "await fetch(",
        "slack_webhook",
    ),
    Plant(
        "stripe, python",
        stripe,
        "stripe.Charge.create(amount=100, api_key='{s}')\n",
        "stripe.Charge.create(amount=100",
        "stripe_key",
    ),
    Plant(
        "google, html",
        google,
        '<script src="https://maps.googleapis.com/maps/api/js?key={s}"></script>\n',
        "</script>",
        "google_api_key",
    ),
    Plant(
        "openai, shell inline",
        openai,
        "OPENAI_API_KEY={s} python app.py --port 8000\n",
        "python app.py --port 8000",
        "openai_api_key",
    ),
    Plant(
        "anthropic, python",
        anthropic,
        "client = anthropic.Anthropic(\n    api_key={s!r},\n)\n",
        "anthropic.Anthropic(",
        "anthropic_api_key",
    ),
    Plant(
        "jwt, bearer header",
        jwt,
        'headers = {{"Authorization": "Bearer {s}"}}\nrequests.get(url, headers=headers)\n',
        "requests.get(url, headers=headers)",
        None,
    ),
    Plant("jwt, js literal", jwt, "const session = '{s}';\n", "const session = ", "jwt"),
    Plant(
        "pem, python",
        pem_key,
        'KEY = """{s}"""\nsigner = load(KEY)\n',
        "signer = load(KEY)",
        "private_key",
    ),
    Plant(
        "pem, yaml block",
        lambda r: pem(r, "EC ")[0].replace("\n", "\n  "),
        "tls:\n  key: |\n  {s}\n  port: 443\n",
        "port: 443",
        "private_key",
    ),
    Plant(
        "pem, escaped newlines in json",
        lambda r: pem(r, "")[0].replace("\n", "\\n"),
        '{{"type": "service_account", "private_key": "{s}\\n", "client_email": "a@b.iam"}}\n',
        '"client_email": "a@b.iam"',
        "private_key",
    ),
    Plant(
        "pem, truncated suggestion",
        lambda r: "-" * 5 + "BEGIN OPENSSH PRIVATE KEY" + "-" * 5 + "\n" + pem_body(r, 3),
        'KEY = """{s}',
        "KEY = ",
        "private_key",
    ),
    Plant(
        "pem, base64 in kubeconfig",
        base64_pem,
        "users:\n- name: admin\n  user:\n    client-key-data: {s}\n",
        "- name: admin",
        "private_key",
    ),
    Plant(
        "url password, postgres",
        password,
        'DATABASE_URL = "postgres://app:{s}@db.internal:5432/app"\n',
        "@db.internal:5432/app",
        "url_password",
    ),
    Plant(
        "url password, redis",
        lambda r: rand(r, ALNUM, 20),
        'r = redis.from_url("redis://:{s}@cache:6379/0")\n',
        "@cache:6379/0",
        "url_password",
    ),
    Plant(
        "password, python",
        password,
        'password = "{s}"\nconnect(user, password)\n',
        "connect(user, password)",
        "password",
    ),
    Plant(
        "password, annotated",
        password,
        'def login(user: str, password: str = "{s}") -> None:\n',
        "def login(user: str, password: str = ",
        "password",
    ),
    Plant(
        "password, kwarg",
        password,
        'conn = psycopg.connect(host="db", password="{s}", dbname="app")\n',
        'dbname="app"',
        "password",
    ),
    Plant(
        "password, js camelCase",
        password,
        "const dbPassword = '{s}';\nconnect(dbPassword);\n",
        "connect(dbPassword);",
        "password",
    ),
    Plant(
        "password, go",
        password,
        'password := "{s}"\nerr := db.Ping()\n',
        "err := db.Ping()",
        "password",
    ),
    Plant(
        "password, yaml",
        password,
        "database:\n  user: app\n  password: {s}\n  host: db\n",
        "  host: db",
        "password",
    ),
    Plant(
        "password, .env",
        password,
        "DB_HOST=localhost\nDB_PASSWORD={s}\nDB_PORT=5432\n",
        "DB_PORT=5432",
        "password",
    ),
    Plant(
        "password, .env crlf",
        password,
        "DB_HOST=localhost\r\nDB_PASS={s}\r\nDB_PORT=5432\r\n",
        "DB_PORT=5432",
        "password",
    ),
    Plant(
        "password, php",
        password,
        "$config = ['user' => 'app', 'password' => '{s}'];\n",
        "'user' => 'app'",
        "password",
    ),
    Plant(
        "password, ruby",
        password,
        'conn = PG.connect(:user => "app", :password => "{s}")\n',
        "PG.connect(",
        "password",
    ),
    Plant(
        "password, comparison",
        password,
        'if password == "{s}":\n    grant()\n',
        "grant()",
        "password",
    ),
    Plant(
        "secret, shell export",
        lambda r: rand(r, ALNUM, 30),
        'export API_SECRET="{s}"\n./deploy.sh\n',
        "./deploy.sh",
        "secret",
    ),
    Plant(
        "secret, java",
        lambda r: rand(r, ALNUM, 32),
        'private static final String API_KEY = "{s}";\n',
        "private static final String API_KEY = ",
        "secret",
    ),
    Plant(
        "secret, json",
        lambda r: rand(r, ALNUM + "-_", 40),
        '{{"client_id": "web", "client_secret": "{s}"}}\n',
        '"client_id": "web"',
        "secret",
    ),
    Plant(
        "secret, toml",
        lambda r: rand(r, ALNUM, 24),
        '[auth]\ntoken = "{s}"\nttl_s = 3600\n',
        "ttl_s = 3600",
        "secret",
    ),
    Plant(
        "secret, dockerfile",
        lambda r: rand(r, ALNUM, 24),
        "FROM python:3.11\nENV API_TOKEN={s}\nRUN pip install .\n",
        "RUN pip install .",
        "secret",
    ),
    Plant(
        "secret, django",
        lambda r: "django-insecure-" + rand(r, ALNUM + "!@#%^&*(-_=+)", 50),
        "SECRET_KEY = '{s}'\nDEBUG = False\n",
        "DEBUG = False",
        None,
    ),
    Plant(
        "high entropy, unnamed",
        high_entropy,
        'SIGNING_SALT = "{s}"\n',
        "SIGNING_SALT = ",
        "base64_high_entropy_string",
    ),
    Plant("twilio sid (detect-secrets)", twilio, 'account = "{s}"\n', "account = ", None),
    Plant(
        "sendgrid (detect-secrets)",
        sendgrid,
        "sg = SendGridAPIClient('{s}')\n",
        "SendGridAPIClient(",
        None,
    ),
    Plant(
        "npm token (detect-secrets)",
        lambda r: "npm_" + rand(r, ALNUM, 36),
        "//registry.npmjs.org/:_authToken={s}\n",
        "//registry.npmjs.org/",
        None,
    ),
]


def plant(case: Plant, seed: int = 0) -> tuple[str, str]:
    secret = case.secret(random.Random(f"{case.name}/{seed}"))
    return case.snippet.format(s=secret), secret


@pytest.mark.parametrize("case", PLANTS, ids=[p.name for p in PLANTS])
def test_planted_secret_is_redacted_and_the_code_around_it_survives(case: Plant) -> None:
    text, secret = plant(case)
    result = redact_secrets(text)
    assert secret not in result.text
    assert case.survives in result.text
    assert result.findings
    if case.kind is not None:
        assert case.kind in result.findings
    assert all(secret not in finding for finding in result.findings)
    for kind in result.findings:
        assert f"[REDACTED:{kind}]" in result.text


@pytest.mark.parametrize("case", PLANTS, ids=[p.name for p in PLANTS])
def test_redaction_is_idempotent(case: Plant) -> None:
    once = redact_secrets(plant(case)[0])
    twice = redact_secrets(once.text)
    assert twice.text == once.text
    assert twice.findings == ()


def test_findings_are_types_in_text_order_without_duplicates() -> None:
    text = f'a = "{aws_id(random.Random(1))}"\nb = "{github(random.Random(2))}"\n'
    text += f'c = "{aws_id(random.Random(3))}"\n'
    assert redact_secrets(text).findings == ("aws_access_key_id", "github_token")


def test_only_the_password_of_a_url_is_redacted() -> None:
    text = "postgresql://reporting:hunter2hunter2@db.example.com:5432/metrics?sslmode=require"
    assert redact_secrets(text).text == (
        "postgresql://reporting:[REDACTED:url_password]@db.example.com:5432/metrics?sslmode=require"
    )


BENIGN = {
    "python service": """
import uuid

# sha256 of the empty file: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
# fixed in commit 9fceb02d0ae598e95dc970b74767f19372d61af8
REVISION = "9fceb02d0ae598e95dc970b74767f19372d61af8"
EXPECTED_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
NAMESPACE = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")
request_id = "550e8400-e29b-41d4-a716-446655440000"
token_count = 3
max_tokens = 512
heading = compass = "NNW"
bypass = "cache-only"
password = os.environ["DB_PASSWORD"]
api_key = settings.openai_api_key
secret = get_secret("db/prod")


class AbstractSingletonProxyFactoryBeanConfigurationRegistry:
    handler = "ProcessTelemetryEventsHandlerFactory"

    def verify_password(self, password: str, hashed: str) -> bool:
        if not password:
            raise ValueError("password required")
        return bcrypt.checkpw(password.encode(), hashed.encode())
""",
    "tokenizer setup": """
tokenizer = AutoTokenizer.from_pretrained("bert-base-uncased")
tokenizer.pad_token = tokenizer.eos_token
eos_token = "<|endoftext|>"
pad_token = "[PAD]"
special_tokens = {"bos_token": "<s>", "unk_token": "<unk>"}
batch = tokenizer(texts, max_length=2048, truncation=True, return_tensors="pt")
""",
    "test with a base64 image": """
PNG_1PX = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
GIF_1PX = "R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7"


def test_avatar_renders():
    html = render_avatar(f"data:image/png;base64,{PNG_1PX}")
    assert 'alt="avatar"' in html
""",
    "javascript": """
const apiKey = process.env.API_KEY;
const res = await fetch(`${BASE_URL}/v1/items`, {
  headers: { Authorization: `Bearer ${token}` },
});
const color = "#ff00aa";
const version = "1.2.3";
if (!res.ok) throw new Error(`request failed: ${res.status}`);
""",
    "github actions": """
jobs:
  test:
    runs-on: ubuntu-latest
    env:
      DATABASE_URL: postgres://app:${{ secrets.DB_PASSWORD }}@localhost:5432/app
    steps:
      - uses: actions/checkout@v4
      - run: make test
        env:
          GITHUB_TOKEN: ${{ secrets.GITHUB_TOKEN }}
          password: ${DB_PASSWORD}
""",
    "shell": """
#!/usr/bin/env bash
set -euo pipefail
export PATH="$HOME/.local/bin:$PATH"
curl -fsSL -H "Authorization: Bearer $TOKEN" https://api.example.com/v1/health
git commit -m "fix: handle token expiry"
cd "$(pwd)/build" && cmake .. -DCMAKE_BUILD_TYPE=Release
""",
    "go": """
token, err := jwt.Parse(tokenString, keyFunc)
if err != nil {
    return fmt.Errorf("parse token: %w", err)
}
srv := &http.Server{Addr: "0.0.0.0:8080", ReadTimeout: 5 * time.Second}
""",
    "package-lock": """
"node_modules/left-pad": {
  "version": "1.3.0",
  "resolved": "https://registry.npmjs.org/left-pad/-/left-pad-1.3.0.tgz",
  "integrity": "sha256-XI5MPzVNApjAyhQzphX8BkmKsKUxD4LdyK24iZeQQnO="
}
""",
    "html form": """
<form method="post">
  <label for="password">Password</label>
  <input type="password" name="password" id="password" placeholder="Enter your password">
</form>
""",
    ".env template": """
DATABASE_URL=postgres://user:${DB_PASSWORD}@localhost:5432/app
API_KEY=
SECRET_KEY=${SECRET_KEY}
LOG_LEVEL=info
""",
}


@pytest.mark.parametrize("name", BENIGN)
def test_benign_code_is_left_unchanged(name: str) -> None:
    text = BENIGN[name]
    result = redact_secrets(text)
    assert result == Redaction(text, ())


def test_an_existing_placeholder_is_left_alone() -> None:
    text = 'password = "[REDACTED:password]"\ntoken: [REDACTED:secret]\n'
    assert redact_secrets(text) == Redaction(text, ())


def test_privacy_mode_drops_all_code_text() -> None:
    text, _ = plant(PLANTS[0])
    assert apply_privacy(text, privacy_mode=True) is None
    assert apply_privacy("x = 1\n", privacy_mode=True) is None
    assert apply_privacy(None, privacy_mode=True) is None


def test_without_privacy_mode_the_text_is_redacted() -> None:
    text, secret = plant(PLANTS[0])
    out = apply_privacy(text, privacy_mode=False)
    assert out is not None
    assert secret not in out
    assert "print(1)" in out
    assert apply_privacy(None, privacy_mode=False) is None
    assert apply_privacy("", privacy_mode=False) == ""


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\x00\x01\x02\xff\ufffd" * 1000,
        "\ud800\udfff lone surrogates \udc80",
        "".join(chr(c) for c in range(0, 0x3000, 7)),
        "İ" * 50 + ' password = "İstanbul2024!" ' + "ß" * 50,  # lowercasing changes the length
        "\r\n\r\r\n\x0b\x0c\x1c\u2028\u2029" * 100,
        "-" * 5 + "BEGIN RSA PRIVATE KEY" + "-" * 5,
        "password=" * 5000,
        '"' * 20_000,
    ],
)
def test_any_text_is_redacted_without_raising(text: str) -> None:
    result = redact_secrets(text)
    assert "unscannable" not in result.findings
    assert redact_secrets(result.text).text == result.text


def test_a_scanning_failure_redacts_everything(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object) -> None:
        raise RuntimeError("a detector bug")

    unscannable = Redaction("[REDACTED:unscannable]", ("unscannable",))
    monkeypatch.setattr(redaction, "_detect_secrets_spans", broken)
    assert redact_secrets("x = 1\n") == Redaction("x = 1\n", ())  # no detector needed
    assert redact_secrets("token = 1\n") == unscannable
    monkeypatch.setattr(redaction, "_gates_passing", broken)  # what every text goes through
    assert redact_secrets("x = 1\n") == unscannable


def test_offsets_hold_when_lowercasing_changes_the_length() -> None:
    text = "İ" * 50 + ' password = "Istanbul2024!"\n' + "ß" * 5
    assert redact_secrets(text).text == "İ" * 50 + ' password = "[REDACTED:password]"\n' + "ß" * 5


def test_long_lines_are_scanned_by_the_explicit_patterns_in_bounded_time() -> None:
    token = github(random.Random(5))
    line = 'blob = "' + "ab0+" * 50_000 + f'"; token = "{token}"'
    hostile = [
        "a" * 200_000,
        "aws" * 70_000,
        "://" * 70_000,
        "sk-" * 70_000,
        "password=" * 20_000,
        "-" * 5 + 'BEGIN RSA PRIVATE KEY-----"' * 6_000,
        "PuTTY-User-Key-File-2: ssh-rsa\n" * 6_000,
        '[REDACTED:x] password = "abc123"\n' * 5_000,
    ]
    started = time.perf_counter()
    result = redact_secrets(line)
    for text in hostile:
        redact_secrets(text)
    assert time.perf_counter() - started < 5.0
    assert token not in result.text
    assert "github_token" in result.findings


# Secrets the canary loop plants, each with the text that frames it.
CANARIES: list[tuple[Factory, Callable[[str], str]]] = [
    (aws_id, lambda s: s),
    (github, lambda s: s),
    (github_pat, lambda s: s),
    (gitlab, lambda s: s),
    (slack, lambda s: s),
    (stripe, lambda s: s),
    (google, lambda s: s),
    (openai, lambda s: s),
    (anthropic, lambda s: s),
    (jwt, lambda s: s),
    (pem_key, lambda s: s),
    (password, lambda s: f"https://svc:{s}@example.com/x"),
    (password, lambda s: f'password = "{s}"'),
    (lambda r: rand(r, ALNUM, 32), lambda s: f"client_secret: '{s}'"),
]
FILLER = [
    "def f(x):\n",
    "    return x + 1\n",
    "foo.bar(baz, qux)",
    "  ",
    "\n",
    "\t",
    "# note ",
    '"',
    "'",
    "(",
    ")",
    ",",
    ";",
    "=",
    ": ",
    "{",
    "}",
    "ünïcödé ",
    "\x00",
    "\r\n",
    "0x1f",
    "self.value",
    "[1, 2, 3]",
]
DELIMITERS = [" ", "\n", '"', "'", "(", ")", ",", ";", "\t", "\r\n"]


def test_canary_no_planted_secret_ever_leaks() -> None:
    """Random code-ish text with 1-3 secrets framed by delimiters at random places (~0.5 s)."""
    rng = random.Random(20240501)
    for _ in range(1500):
        pieces = [rng.choice(FILLER) for _ in range(rng.randint(0, 40))]
        planted = []
        for _ in range(rng.randint(1, 3)):
            factory, frame = rng.choice(CANARIES)
            secret = factory(rng)
            planted.append(secret)
            framed = rng.choice(DELIMITERS) + frame(secret) + rng.choice(DELIMITERS)
            pieces.insert(rng.randint(0, len(pieces)), framed)
        text = "".join(pieces)
        result = redact_secrets(text)
        for secret in planted:
            assert secret not in result.text, (text, result.text)
        assert redact_secrets(result.text).text == result.text


def test_a_typical_suggestion_is_redacted_fast() -> None:
    """A loose regression guard for the SDK's hot path (measured ~40 µs; bound 25x that)."""
    text = (
        "    def handle(self, event: Event) -> None:\n"
        '        payload = json.dumps({"user": event.user_id, "n": 3, "ok": True})\n'
        '        self.client.send(topic="events.completions", value=payload)\n'
        '        logger.info("sent %s in %.1f ms", event.id, elapsed_ms)\n'
        "        return None  # done\n"
    )
    redact_secrets(text)
    started = time.perf_counter()
    for _ in range(200):
        redact_secrets(text)
    assert (time.perf_counter() - started) / 200 < 1e-3


# --- pseudonyms ---------------------------------------------------------------------------------

KEY = bytes(range(32))
PSEUDONYM = re.compile(r"(user|repo):[0-9a-f]{32}")


def test_pseudonym_is_the_truncated_hmac_of_kind_and_id() -> None:
    expected = hmac.new(KEY, b"user\x00alice@example.com", hashlib.sha256).digest()[:16].hex()
    assert Pseudonymizer(KEY).pseudonym("user", "alice@example.com") == f"user:{expected}"


def test_pseudonyms_are_deterministic_and_shaped() -> None:
    a, b = Pseudonymizer(KEY), Pseudonymizer(KEY)
    assert a.pseudonym("user", "alice") == b.pseudonym("user", "alice")
    assert PSEUDONYM.fullmatch(a.pseudonym("user", "alice"))
    assert PSEUDONYM.fullmatch(a.pseudonym("repo", "github.com/acme/api"))
    assert a.pseudonym("user", "") != a.pseudonym("user", "\x00")


def test_pseudonyms_differ_across_keys_kinds_and_ids() -> None:
    one, other = Pseudonymizer(KEY), Pseudonymizer(KEY[::-1])
    assert one.pseudonym("user", "alice") != other.pseudonym("user", "alice")
    assert one.pseudonym("user", "alice")[5:] != one.pseudonym("repo", "alice")[5:]
    assert one.pseudonym("user", "alice") != one.pseudonym("user", "alicf")
    # the separator keeps (kind, id) pairs apart: ("user", "x") is not ("use", "rx")
    assert one.pseudonym("user", "x")[5:] != one.pseudonym("use", "rx")[4:]


def test_an_already_pseudonymised_id_is_returned_unchanged() -> None:
    p = Pseudonymizer(KEY)
    once = p.pseudonym("user", "alice")
    assert p.pseudonym("user", once) == once
    assert p.pseudonym("repo", once) != once  # a pseudonym of another kind is just an id
    assert p.pseudonym("user", once.upper()) != once.upper()


@pytest.mark.parametrize("key", [b"", b"short"])
def test_an_empty_or_short_key_is_refused_naming_the_fix(key: bytes) -> None:
    with pytest.raises(PrivacyError, match="FLYWHEEL_PSEUDONYM_KEY") as raised:
        Pseudonymizer(key)
    assert "hex" in str(raised.value)
    assert isinstance(raised.value, FlywheelError)


@pytest.mark.parametrize("secret", ["", "   \n", "0123abcd"])
def test_from_secret_refuses_empty_or_short_secrets(secret: str) -> None:
    with pytest.raises(PrivacyError, match="FLYWHEEL_PSEUDONYM_KEY"):
        Pseudonymizer.from_secret(secret)


def test_from_secret_decodes_hex_and_takes_other_text_as_is() -> None:
    hex_key = KEY.hex()
    assert Pseudonymizer.from_secret(f"{hex_key}\n").pseudonym("user", "a") == Pseudonymizer(
        KEY
    ).pseudonym("user", "a")
    text = "correct horse battery staple"
    assert Pseudonymizer.from_secret(text).pseudonym("user", "a") == Pseudonymizer(
        text.encode()
    ).pseudonym("user", "a")


def test_the_key_never_shows_in_repr() -> None:
    p = Pseudonymizer(b"k" * 32)
    assert "k" * 4 not in repr(p)
    assert "***" in repr(p)


@pytest.mark.parametrize("kind", ["", "User", "user:x", "a b"])
def test_an_invalid_kind_is_refused(kind: str) -> None:
    with pytest.raises(PrivacyError, match="lowercase"):
        Pseudonymizer(KEY).pseudonym(kind, "alice")


# --- the fast path: whole-text check and per-line gates against every plugin on every line ------


def _detector_examples(r: random.Random) -> list[str]:
    """A value in the shape each detect-secrets plugin matches (assembled, never real)."""
    lower36 = string.ascii_lowercase + string.digits
    return [
        "A" + "KC" + rand(r, ALNUM, 40),  # Artifactory
        "A" + "P6" + rand(r, ALNUM, 12),
        "Account" + "Key=" + rand(r, B64, 86) + "==",  # Azure storage
        "M" + rand(r, ALNUM, 23) + "." + rand(r, ALNUM, 6) + "." + rand(r, ALNUM, 27),  # Discord
        rand(r, lower36, 32) + "-us" + str(r.randint(1, 20)),  # Mailchimp
        "//registry.npmjs.org/:_auth" + "Token=" + rand(r, lower36, 36),  # npm
        "py" + "pi-AgEIcHlwaS5vcmc" + rand(r, ALNUM + "-_", 72),  # PyPI
        sendgrid(r),
        "sq0" + "csp-" + rand(r, ALNUM, 43),  # Square
        str(r.randint(10**8, 10**9)) + ":" + rand(r, ALNUM, 35),  # Telegram
        twilio(r),
        "S" + "K" + rand(r, lower36, 32),
        rand(r, "0123456789abcdef", 40),  # hex entropy
        rand(r, B64 + "=", 44),  # base64 entropy
        rand(r, ALNUM, 12),
        "8.8." + str(r.randint(1, 254)) + "." + str(r.randint(1, 254)),  # public IP
        password(r),
    ]


_FRAMES = [
    "{s}",
    'x = "{s}"\n',
    "key: '{s}'\n",
    "cloudant_password = '{s}'\n",
    'ibm_cloud_iam_api_key = "{s}"\n',
    "softlayer_api_key: {s}\n",
    'db_password = "{s}"\n',
    '{{"api_key": "{s}", "n": 1}}',
    "export SECRET_TOKEN={s}\n",
    "https://admin:{s}@db.internal:5432/app\n",
    "headers = {{'Authorization': 'Bearer {s}'}}\n",
    "    return call('{s}')  # done\n",
    "aws_secret_access_key = {s}\n",
]


def _corpus() -> list[str]:
    """Planted, benign, canary-style, redacted and cut-up texts: what the gates are held to."""
    r = random.Random(7)
    texts = list(BENIGN.values())
    for case in PLANTS:
        for seed in range(2):
            text, _ = plant(case, seed)
            texts += [text, redact_secrets(text).text]
    for secret in _detector_examples(r) + [f(r) for f, _ in CANARIES]:
        texts += [frame.format(s=secret) for frame in _FRAMES]
    for _ in range(400):  # random code-ish text, secrets framed in it, then cut anywhere
        pieces = [r.choice(FILLER + _FRAMES) for _ in range(r.randint(1, 12))]
        secret = r.choice(_detector_examples(r) + [f(r) for f, _ in CANARIES])
        text = "".join(pieces).replace("{s}", secret)
        start = r.randint(0, len(text))
        texts += [text, text[start:], text[: r.randint(0, len(text))]]
    return texts


def test_the_fast_path_redacts_exactly_like_every_plugin_on_every_line() -> None:
    """The whole-text shortcut and the per-line gates only skip work: with every detect-secrets
    plugin run on every line (and no shortcut) the output is the same, text and findings."""
    corpus = _corpus()
    differ = [t for t in corpus if redaction._redact(t, gated=False) != redact_secrets(t)]
    assert not differ, differ[:3]
    skipped = [t for t in corpus if not redaction._gates_passing(t)]
    assert len(skipped) > 50  # the shortcut is exercised, not only the full scan
