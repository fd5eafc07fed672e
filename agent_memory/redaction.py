"""PII and secret redaction for memory text (English and Chinese), standard library only."""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

# Application order: the most specific kinds come first so that a value is claimed by exactly one
# kind (e.g. an e-mail's digits are never seen as a phone, a CN id never as a bank card).
KINDS: tuple[str, ...] = ("email", "api_key", "secret", "cn_id", "bank_card", "phone")

# Python's \b treats CJK characters as word characters, so "是13800138000" has no \b before the
# digits. Numeric kinds use explicit ASCII lookarounds instead; the second half of each keeps us
# from matching part of a decimal, a grouped number or a dash-joined digit run ("1.2", "1,299", "1-2").
_NL = r"(?<![0-9A-Za-z_])(?<![0-9][.,-])"
_NR = r"(?![0-9A-Za-z_])(?![.,-][0-9])"
_TOK_L = r"(?<![A-Za-z0-9_-])"
_TOK_R = r"(?![A-Za-z0-9_-])"

# Secret values are taken to be ASCII (that is how passwords/codes are typed); stopping at the first
# non-ASCII char lets "密码是abc123请记住" end the value at "请". Double quotes, & and <> end a value
# too (query strings, markup); a value opened by a quote runs to the closing quote. A value never
# starts with a placeholder, so "api_key=[API_KEY]" is not replaced a second time.
_VALUE = (
    r"(?P<v>(?!\[[A-Z_]+\])(?:"
    r"(?<=[\"'])[^\"'\r\n]+(?=[\"'])"  # quoted: everything up to the closing quote, spaces included
    r"|[^\s\"&<>\x7f-\U0010ffff]+?(?=[.,;:!?)\]]*(?:\s|$|[\"&<>\x7f-\U0010ffff]))"  # trailing punctuation is prose
    r"))"
)
# An identifier may end in a keyword: OPENAI_API_KEY, db-password, AWS_SECRET_ACCESS_KEY.
_IDENT_PREFIX = r"(?<![A-Za-z0-9_-])(?:[A-Za-z0-9]+[_-])*"
# Key words match case-insensitively through scoped (?i:...) groups only: a global IGNORECASE would
# make the value's "not non-ASCII" class reject "s" and "k" (they case-fold to U+017F and U+212A).
_EN_SECRET_WORDS = (
    r"password|passwd|passphrase|pwd|passcode|pin(?:\s*code)?|secret(?:[\s_-]?key)?|token|"
    r"api[\s_-]?key|access[\s_-]?key|client[\s_-]?secret|otp|one[\s-]time\s+(?:code|password)|"
    r"(?:verification|security|auth(?:entication)?)\s+code|cvv|cvc"
)
_ZH_SECRET_WORDS = r"密码|口令|验证码|校验码|动态码|安全码|密钥|秘钥|令牌|(?i:pin)码"


def _luhn_ok(digits: str) -> bool:
    """Return True if the digit string passes the Luhn checksum."""
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


def _is_card(m: re.Match[str]) -> bool:
    """Accept 13-19 digit Luhn-valid numbers whose first digit is a real card network's."""
    digits = re.sub(r"\D", "", m.group(0))
    # Networks start with 2-6 (Mastercard, Amex, Visa, Discover, UnionPay...) or 9 (old CN debit);
    # this drops ms timestamps (1...) and many internal ids that pass Luhn by chance (1 in 10).
    return 13 <= len(digits) <= 19 and digits[0] in "234569" and _luhn_ok(digits)


_CN_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)


def _is_cn_id(m: re.Match[str]) -> bool:
    """Accept an 18-char CN resident id with a real birth date and a valid ISO 7064 MOD 11-2 check."""
    s = m.group(0).upper()
    try:
        born = _dt.date(int(s[6:10]), int(s[10:12]), int(s[12:14]))
    except ValueError:
        return False
    if not _dt.date(1900, 1, 1) <= born <= _dt.date.today():
        return False
    total = sum(int(c) * w for c, w in zip(s[:17], _CN_ID_WEIGHTS, strict=True))
    return "10X98765432"[total % 11] == s[17]


def _is_phone(m: re.Match[str]) -> bool:
    """Bound the digit count to E.164 so '+1 2' style fragments are not phones."""
    return 7 <= sum(c.isdigit() for c in m.group(0)) <= 15


def _is_secret(m: re.Match[str]) -> bool:
    """After 'is'/'was', require quotes, a digit or a symbol: 'the token is expired' is prose."""
    quoted = m.string[m.start("v") - 1] in "\"'"
    return quoted or not (m.group("is") and m.group("v").isalpha())


def _is_token(m: re.Match[str]) -> bool:
    """A keyword-introduced token must mix letters and digits, as generated keys do."""
    v = m.group("v")
    return any(c.isdigit() for c in v) and any(c.isalpha() for c in v)


_Check = Callable[[re.Match[str]], bool]


def _card_shaped(m: re.Match[str]) -> bool:
    """A number given as a card starts like a card network's (a timestamp does not)."""
    return re.sub(r"\D", "", m.group("v"))[:1] in "234569"


def _not_a_date(m: re.Match[str]) -> bool:
    """A number given as a phone that is a date ("手机 2024-03-15 买的", "20240315") is a date."""
    digits = re.sub(r"\D", "", m.group("v"))
    if len(digits) == 8 and digits[:2] in ("19", "20"):
        try:
            _dt.date(int(digits[:4]), int(digits[4:6]), int(digits[6:]))
            return False
        except ValueError:
            return True
    return True


def _introduced(words: str, number: str) -> re.Pattern[str]:
    """A number the text introduces as what it is ("身份证号 1101...", "card number: 4111 ..."): the
    key word, a few joining characters (号, 码, 是, a colon, "number is"), then the number as `v`.

    Such a number is redacted whatever its checksum: a mistyped or made-up id is still given as
    somebody's id.
    """
    joint = r"(?:\.?\s*(?:号码|号|码|(?i:number|no\.?|#))?\s*(?:是|为|(?i:is))?\s*[:：=]?\s*)"
    return re.compile(rf"(?:{words}){joint}" + _NL + rf"(?P<v>{number})" + _NR)


# Key words that introduce an identity document's number, a card's, a phone's; `(?i:...)` scoped.
# An identity document, not any id: "my discord id is 1234..." is left alone.
_ID_WORDS = (r"身份证|证件|护照|(?<![A-Za-z])(?i:passport|identity card|national id|id card|id number|id no|"
             r"resident id|citizen id)(?![A-Za-z])")
_CARD_WORDS = (r"银行卡|信用卡|储蓄卡|借记卡|卡号|(?<![A-Za-z])(?i:card|credit card|debit card|bank account)(?![A-Za-z])"
               r"|(?<![A-Za-z])(?i:account)(?=\s*(?i:number|no\.?|#|[:：]))")
_PHONE_WORDS = (r"手机|电话|联系方式|(?<![A-Za-z])(?i:phone|mobile|tel|telephone|whatsapp|call me at)(?![A-Za-z])"
                r"|(?<![A-Za-z])(?i:cell)(?=\s*(?i:phone|number|no\.?|#|[:：]))")

# (kind, pattern, check): rows run top to bottom. A named group "v" means "replace only this part"
# (the keyword stays); check=None accepts every match.
_RULES: tuple[tuple[str, re.Pattern[str], _Check | None], ...] = (
    (
        "email",
        re.compile(r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}"),
        None,
    ),
    (
        "api_key",
        re.compile(
            _TOK_L
            + r"(?:sk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}"  # OpenAI / Anthropic
            r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"  # GitHub
            r"|AKIA[0-9A-Z]{16}"  # AWS access key id
            r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
            r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,})"  # JWT
            + _TOK_R
        ),
        None,
    ),
    (
        "api_key",
        # Bearer tokens and long generated values after a key word; the key word itself is kept.
        re.compile(
            r"(?:\b(?i:bearer)\s+|"
            + _IDENT_PREFIX
            + r"(?i:api[_-]?key|access[_-]?key|secret(?:[_-]?key)?|token)\s*[:=]\s*[\"']?)"
            r"(?P<v>[A-Za-z0-9_~+/-][.A-Za-z0-9_~+/-]{18,}[A-Za-z0-9_~+/-]=*)(?![.A-Za-z0-9_~+/=-])"
        ),
        _is_token,
    ),
    (
        "secret",
        re.compile(
            r"(?:"
            + _IDENT_PREFIX
            + rf"(?i:{_EN_SECRET_WORDS})(?:\s*[:=：]|\s+(?P<is>(?i:is|was))\s*[:：]?\s)"
            + rf"|(?:{_ZH_SECRET_WORDS})(?:\s*(?:是|为|[:：=]))*)"
            + r"\s*[\"']?"
            + _VALUE
        ),
        _is_secret,
    ),
    ("cn_id", _introduced(_ID_WORDS, r"[0-9]{17}[0-9Xx]|[0-9]{15}"), None),
    (
        "cn_id",
        re.compile(_NL + r"[1-9][0-9]{5}(?:18|19|20)[0-9]{2}[01][0-9][0-3][0-9]{4}[0-9Xx]" + _NR),
        _is_cn_id,
    ),
    # A tail group never takes the month of an expiry ("... 1111 12/29").
    ("bank_card", _introduced(_CARD_WORDS, r"[0-9]{12,19}|[0-9]{4}(?:[ -][0-9]{4}){2,3}(?:[ -][0-9]{1,3}(?![0-9/]))?"),
     _card_shaped),
    # Grouped 19-digit cards get their own row: as an optional tail of the 16-digit form, the tail
    # would swallow a following "12" of "4111 1111 1111 1111 12/29", fail Luhn and leak the card.
    ("bank_card", re.compile(_NL + r"[0-9]{4}(?:[ -][0-9]{4}){3}[ -][0-9]{3}" + _NR), _is_card),
    (
        "bank_card",
        re.compile(
            _NL
            + r"(?:[0-9]{13,19}"
            r"|[0-9]{4}(?:[ -][0-9]{4}){2,3}"  # 4-4-4(-4)
            r"|[0-9]{4}[ -][0-9]{6}[ -][0-9]{4,5})"  # Amex / Diners 4-6-5
            + _NR
        ),
        _is_card,
    ),
    ("phone", _introduced(_PHONE_WORDS, r"\+?[0-9](?:[ .-]?[0-9]){6,14}"), _not_a_date),
    (
        "phone",
        re.compile(
            _NL
            + r"(?:\+[0-9]{1,3}[ .-]?\(?[0-9]{1,4}\)?(?:[ .-]?[0-9]{2,4}){1,4}"  # international
            r"|(?:1[ .-])?(?:\([0-9]{3}\)\s?|[0-9]{3}[-. ])[0-9]{3}[-. ][0-9]{4}"  # US/CA, (415) 555-0132
            r"|1[3-9][0-9](?P<sep>[- ]?)[0-9]{4}(?P=sep)[0-9]{4}"  # CN mobile, same separator twice
            r"|0[0-9]{2,3}-[0-9]{7,8})"  # CN landline 010-12345678
            + _NR
        ),
        _is_phone,
    ),
)

_PLACEHOLDERS = {kind: f"[{kind.upper()}]" for kind in KINDS}


@dataclass(frozen=True)
class Redaction:
    """Redacted text plus how many values of each kind were replaced."""

    text: str
    counts: dict[str, int]

    @property
    def changed(self) -> bool:
        """True if anything was replaced."""
        return bool(self.counts)


class Redactor:
    """Replaces PII and secrets with typed placeholders such as [EMAIL] or [SECRET]."""

    def __init__(self, enabled: bool = True, kinds: Iterable[str] | None = None) -> None:
        """Apply the given subset of KINDS (all when None); enabled=False makes redact a no-op."""
        wanted = set(KINDS if kinds is None else kinds)
        unknown = wanted.difference(KINDS)
        if unknown:
            raise ValueError(f"unknown redaction kinds: {sorted(unknown)}; expected a subset of {KINDS}")
        self.enabled = enabled
        self.kinds = tuple(k for k in KINDS if k in wanted)
        self._rules = [rule for rule in _RULES if rule[0] in wanted]

    def redact(self, text: str) -> Redaction:
        """Return the redacted text and per-kind replacement counts."""
        if not self.enabled or not text:
            return Redaction(text, {})
        counts: dict[str, int] = {}
        for kind, pattern, check in self._rules:

            def replace(m: re.Match[str], kind: str = kind, check: _Check | None = check) -> str:
                if check is not None and not check(m):
                    return m.group(0)
                counts[kind] = counts.get(kind, 0) + 1
                if "v" not in m.re.groupindex:
                    return _PLACEHOLDERS[kind]
                # Keep the key word ("password: ", "Bearer ") and replace only the value.
                whole, base = m.group(0), m.start()
                return whole[: m.start("v") - base] + _PLACEHOLDERS[kind] + whole[m.end("v") - base :]

            text = pattern.sub(replace, text)
        return Redaction(text, counts)

    def redact_text(self, text: str) -> str:
        """Return only the redacted text."""
        return self.redact(text).text
