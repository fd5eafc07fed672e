"""Tests for agent_memory.redaction: planted PII is replaced, ordinary numbers are left alone."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The project is not necessarily pip-installed when tests run; make the repo root importable.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent_memory.redaction import KINDS, Redaction, Redactor  # noqa: E402
from agent_memory.rows import RowBuilder  # noqa: E402


def cn_id(first17: str) -> str:
    """Append the ISO 7064 MOD 11-2 check character to 17 digits (independent of the module)."""
    weights = [2 ** (17 - i) % 11 for i in range(17)]
    return first17 + "10X98765432"[sum(int(c) * w for c, w in zip(first17, weights, strict=True)) % 11]


VALID_ID = "11010519491231002X"
VALID_ID_2 = cn_id("44030619900307123")  # Shenzhen, born 1990-03-07


@pytest.fixture
def r() -> Redactor:
    return Redactor()


def luhn_ok(number: str) -> bool:
    """Reference Luhn check used to confirm the fixtures themselves."""
    digits = [int(c) for c in number if c.isdigit()][::-1]
    return sum(d if i % 2 == 0 else (d * 2 - 9 if d > 4 else d * 2) for i, d in enumerate(digits)) % 10 == 0


def test_fixture_helpers_agree_with_known_values() -> None:
    assert cn_id(VALID_ID[:17]) == VALID_ID
    assert luhn_ok("4111 1111 1111 1111") and luhn_ok("6222 0212 3456 7890 128")
    assert not luhn_ok("20240508123456")


@pytest.mark.parametrize(
    ("text", "raw", "kind"),
    [
        ("Reach me at alice.smith+notes@example.co.uk tomorrow.", "alice.smith+notes@example.co.uk", "email"),
        ("我的邮箱是zhang.wei@163.com，谢谢", "zhang.wei@163.com", "email"),
        ("Call +1 415 555 0132 after 5pm", "+1 415 555 0132", "phone"),
        ("London office: +44 20 7946 0958.", "+44 20 7946 0958", "phone"),
        ("Beijing: +86 138 0013 8000", "+86 138 0013 8000", "phone"),
        ("Office (415) 555-0132 ext 2", "(415) 555-0132", "phone"),
        ("cell 415-555-0132", "415-555-0132", "phone"),
        ("我的手机是13800138000，有事打给我", "13800138000", "phone"),
        ("手机 138-0013-8000", "138-0013-8000", "phone"),
        ("手机：138 0013 8000。", "138 0013 8000", "phone"),
        (f"身份证号{VALID_ID}，请保密", VALID_ID, "cn_id"),
        (f"My ID is {VALID_ID_2}.", VALID_ID_2, "cn_id"),
        ("Visa test card 4111 1111 1111 1111 exp 12/29", "4111 1111 1111 1111", "bank_card"),
        ("卡号4242424242424242，开户行招商", "4242424242424242", "bank_card"),
        ("card 4111-1111-1111-1111", "4111-1111-1111-1111", "bank_card"),
        ("Amex 3782 822463 10005", "3782 822463 10005", "bank_card"),
        ("卡号 6222 0212 3456 7890 128，工商银行", "6222 0212 3456 7890 128", "bank_card"),
        ("card 4111 1111 1111 1111 12/29 cvv on back", "4111 1111 1111 1111", "bank_card"),
        ("key sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z in .env", "sk-proj-Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4z", "api_key"),
        ("old key sk-Ab3dEf6hIj9kLm2nOp5qRs8tUv1w", "sk-Ab3dEf6hIj9kLm2nOp5qRs8tUv1w", "api_key"),
        ("gh token ghp_16C7e42F292c6912E7710c838347Ae178B4a", "ghp_16C7e42F292c6912E7710c838347Ae178B4a", "api_key"),
        ("github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "api_key"),
        ("AWS id AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE", "api_key"),
        ("slack xoxb-1234567890-0987654321-AbCdEfGhIjKl", "xoxb-1234567890-0987654321-AbCdEfGhIjKl", "api_key"),
        (
            "Authorization: Bearer 9f8e7d6c5b4a39281706f5e4d3c2b1a0",
            "9f8e7d6c5b4a39281706f5e4d3c2b1a0",
            "api_key",
        ),
        (
            "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U ok",
            "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "api_key",
        ),
        ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG", "api_key"),
        ("db password: hunter2", "hunter2", "secret"),
        ("my password is hunter2.", "hunter2", "secret"),
        ("connect with user=bob&pwd=Tr0ub4dor&x=1", "Tr0ub4dor", "secret"),
        ("secret: open-sesame", "open-sesame", "secret"),
        ("token: abc123", "abc123", "secret"),
        ("密码是abc123请记住", "abc123", "secret"),
        ("WiFi 密码：Xy9!pass。", "Xy9!pass", "secret"),
        ("口令: swordfish42", "swordfish42", "secret"),
        ("验证码 482913，5分钟内有效", "482913", "secret"),
        ("Your verification code is 482913.", "482913", "secret"),
    ],
)
def test_planted_value_is_replaced(r: Redactor, text: str, raw: str, kind: str) -> None:
    out = r.redact(text)
    assert raw not in out.text
    assert f"[{kind.upper()}]" in out.text
    assert out.counts == {kind: 1}
    assert out.changed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("my password is hunter2", "my password is [SECRET]"),
        ("密码是abc123", "密码是[SECRET]"),
        ("密码：abc123。", "密码：[SECRET]。"),
        ('The password is "correct horse"', 'The password is "[SECRET]"'),
        ("api_key=sk-Ab3dEf6hIj9kLm2nOp5qRs8tUv1w", "api_key=[API_KEY]"),
        ("Bearer 9f8e7d6c5b4a39281706f5e4d3c2b1a0", "Bearer [API_KEY]"),
    ],
)
def test_keyword_is_kept_and_only_value_replaced(r: Redactor, text: str, expected: str) -> None:
    assert r.redact_text(text) == expected


def test_mixed_sentence_counts(r: Redactor) -> None:
    text = (
        "联系张伟：zhang.wei@example.com 或 13800138000，备用 +1 415 555 0132；"
        f"身份证{VALID_ID}，卡号 4111 1111 1111 1111，密码是hunter2。"
    )
    out = r.redact(text)
    assert out.counts == {"email": 1, "phone": 2, "cn_id": 1, "bank_card": 1, "secret": 1}
    assert out.text == (
        "联系张伟：[EMAIL] 或 [PHONE]，备用 [PHONE]；身份证[CN_ID]，卡号 [BANK_CARD]，密码是[SECRET]。"
    )


FALSE_POSITIVES = [
    "Meeting on 2024-05-08 at 13:56, moved to 05/08/2024 14:30:00.",
    "我们2024年5月8日下午3点见，2024/05/08也行。",
    "The laptop cost $1,299.99; the phone was ¥3999, 另一个3999元。",
    "I ran 5 km, have 3 kids and 2 cats.",
    "order 20240508123456 shipped; 订单号 20240508123456 已发货",
    "Upgraded to v2.13.0 on Python 3.11.7; build 1.2.3.4, host 10.0.0.12.",
    "Born in 1987, moved in 2015, up 12.5% this year, 100% done.",
    "Office zip 94107, room 1203, floor 12.",
    "timestamp 1715155200000 and epoch 1715155200",
    "pi is 3.14159265358979323846",
    "the password is required and the token is expired",
    "密码错误3次，请重置",
    "max_tokens=4096, temperature=0.7, top_p=0.95",
    "ISO week 2024-W19, score 3-1, ratio 16:9",
]


@pytest.mark.parametrize("text", FALSE_POSITIVES)
def test_ordinary_text_is_unchanged(r: Redactor, text: str) -> None:
    out = r.redact(text)
    assert out.text == text
    assert out.counts == {}
    assert not out.changed


@pytest.mark.parametrize(
    ("number", "is_card"),
    [
        ("4111 1111 1111 1111", True),
        ("4111 1111 1111 1112", False),
        ("4242424242424242", True),
        ("4242424242424241", False),
        ("5555-5555-5555-4444", True),
        ("5555-5555-5555-4445", False),
    ],
)
def test_a_bare_bank_card_needs_luhn_and_one_introduced_as_a_card_does_not(
    r: Redactor, number: str, is_card: bool
) -> None:
    out = r.redact(f"ref {number} on file")
    assert (out.text == "ref [BANK_CARD] on file") is is_card
    assert (out.text == f"ref {number} on file") is not is_card
    for said in (f"card {number} on file", f"my credit card number is {number}", f"信用卡卡号：{number}"):
        assert r.redact(said).counts == {"bank_card": 1}, said
    # The expiry after a grouped card stays prose.
    assert r.redact_text(f"card number {number} 12/29") == "card number [BANK_CARD] 12/29"


def test_a_bare_cn_id_needs_check_digit_and_birth_date_one_introduced_as_an_id_does_not(r: Redactor) -> None:
    wrong_check = VALID_ID[:17] + "1"
    bad_date = cn_id("11010519491331002")  # month 13, check digit still "valid"
    future = cn_id("11010521991231002")  # born 2199
    for number in (wrong_check, bad_date, future):
        assert r.redact_text(f"ref {number} end") == f"ref {number} end"
        # A mistyped or made-up id given as an id is still somebody's id.
        assert r.redact_text(f"ID number {number} end") == "ID number [CN_ID] end"
        assert r.redact_text(f"我的身份证号{number}，帮我记一下") == "我的身份证号[CN_ID]，帮我记一下"
        assert r.redact_text(f"passport no. {number}") == "passport no. [CN_ID]"
    assert r.redact_text(f"ref {VALID_ID.lower()} end") == "ref [CN_ID] end"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("手机 1380013800 别打错", "手机 [PHONE] 别打错"),  # ten digits: no mobile pattern of its own
        ("我的电话是 8765 4321", "我的电话是 [PHONE]"),
        ("mobile: 07700 900 12", "mobile: [PHONE]"),
        ("call me at 020 7946 0958", "call me at [PHONE]"),
    ],
)
def test_a_number_introduced_as_a_phone_is_redacted(r: Redactor, text: str, expected: str) -> None:
    assert r.redact_text(text) == expected


@pytest.mark.parametrize(
    "text",
    ["I have 2 phones, 10 cards and 3 IDs", "card game 2024 edition", "我有3个手机号，2张卡", "the ID column holds 42",
     "phone battery at 15%", "卡号后四位 1234", "Excel cell 1048576 is the last row", "手机 2024-03-15 买的",
     "tel 20240315 meeting", "My discord id is 123456789012345678", "order ID 202405201234567890 shipped",
     "my AWS account 123456789012 is prod", "Timestamp card 1700000000000 ms"],
)
def test_key_words_alone_redact_nothing(r: Redactor, text: str) -> None:
    assert r.redact_text(text) == text


def test_placeholders_are_never_rematched(r: Redactor) -> None:
    once = r.redact("password: bob@example.com, api_key=sk-Ab3dEf6hIj9kLm2nOp5qRs8tUv1w")
    assert once.text == "password: [EMAIL], api_key=[API_KEY]"
    assert once.counts == {"email": 1, "api_key": 1}
    again = r.redact(once.text)
    assert again.text == once.text and again.counts == {}


def test_disabled_redactor_is_a_no_op() -> None:
    text = f"alice@example.com 13800138000 {VALID_ID} password: hunter2"
    out = Redactor(enabled=False).redact(text)
    assert out == Redaction(text, {})
    assert not out.changed


def test_kinds_subset() -> None:
    text = "alice@example.com, 13800138000, password: hunter2"
    assert Redactor(kinds=["phone"]).redact(text) == Redaction(
        "alice@example.com, [PHONE], password: hunter2", {"phone": 1}
    )
    assert Redactor(kinds=("email", "secret")).redact_text(text) == "[EMAIL], 13800138000, password: [SECRET]"
    assert Redactor(kinds=[]).redact_text(text) == text


def test_unknown_kind_is_rejected() -> None:
    with pytest.raises(ValueError):
        Redactor(kinds=["ssn"])


def test_kinds_constant_and_empty_text() -> None:
    assert set(KINDS) == {"email", "phone", "cn_id", "bank_card", "api_key", "secret"}
    assert Redactor().redact("") == Redaction("", {})


def test_a_speaker_name_is_redacted_in_the_message_log(rows: RowBuilder) -> None:
    records = rows.message_records("acme", "u1", "s1", [
        {"role": "user", "content": "hi", "name": "alice@example.com"}, {"role": "user", "content": "yo", "name": "Alice"}])
    assert [r.name for r in records] == ["[EMAIL]", "Alice"]
