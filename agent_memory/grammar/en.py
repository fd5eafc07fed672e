"""English: who speaks, someone of the user's, changes of mind, corrections (see `agent_memory.grammar`)."""

from __future__ import annotations

import re

from agent_memory.grammar import entry, table

_I = re.IGNORECASE
# What began for someone: "started last week", "got diagnosed with ADHD".
_BEGAN = "got diagnosed|diagnosed|started|began|joined|graduated|adopted"
_IRREGULAR_PAST = (
    "gave went got made took saw met bought had did ran wrote ate drank flew left came found lost won sold told spent "
    "sent built taught brought began chose drove fell forgot heard kept knew led paid rode said sat slept spoke "
    "stood swam threw woke wore caught fought held broke"
).split()

EN = table(
    # -- who speaks ------------------------------------------------------------------------------
    # The user as subject: I, I'm, my <thing> (not a person), we/our for the user's team.
    entry("speaker.self", r"^(?:i|i'm|im|i've|ive|i'll|i am|i have|my|we|we're|we've|our)\b", flags=_I, anchored=True,
          examples=("I'm a nurse", "my commute is long", "we've moved to Leeds"),
          counterexamples=("it rained", "imagine that", "you said so")),
    entry("speaker.my", r"^(?:my|our)\s+(\w[\w-]*)(?:\s+(\w[\w-]*))?", flags=_I, anchored=True,
          examples=("my boss takes oat milk", "our team lead is new"), counterexamples=("I own my flat",)),
    # Said without a subject, the user's: "allergic to shellfish", "quit smoking", "started last week".
    entry("speaker.subjectless",
          r"^(?:prefer|love|like|hate|can'?t stand|addicted|allergic|vegetarian|vegan|been|have been|playing|working|"
          r"living|going|doing|using|drinking|eating|not doing|no more|done with|moving|switching|booking|planning|"
          r"heading|flying|changed my mind|scratch that|been meaning|quit|gave up|stopped|uninstalled|deleted|"
          r"cancell?ed|ditched|dropped|switched|" + _BEGAN + r")\b",
          flags=_I, anchored=True,
          examples=("allergic to shellfish", "quit smoking last year", "started last week", "flying out tomorrow"),
          counterexamples=("the flight is late", "likely not", "lovely weather")),
    # What began for someone, said without a subject: the user's at the start, but after someone
    # else's clause, theirs ("My wife got a new job, started last week").
    entry("speaker.began", rf"^(?:{_BEGAN})\b", flags=_I, anchored=True,
          examples=("started last week", "got diagnosed with ADHD last year"), counterexamples=("stopped by", "I started")),
    # Who the speaker is, said the chat way: "single dad of a 4-year-old here", "backend dev here".
    entry("speaker.here", r"^(?!.*\b(?:is|are|was|were|it|you|they|he|she)\b)(?:[\w'-]+\s+){1,6}here[\s.!]*$",
          flags=_I, anchored=True,
          examples=("single dad of a 4-year-old here", "backend dev here."),
          counterexamples=("it is cold here", "here", "the party is here")),
    # When or how often, said before the speaker: "these days I drink ...", "Thursdays I sing in a choir".
    entry("speaker.lead", r"^(?:(?:these days|nowadays|lately|recently|currently|now|still|also|usually|always|"
          r"mostly|on \w+s|\w+days|every \w+|in the (?:mornings?|evenings?)|at night)[,\s]+)+", flags=_I, anchored=True,
          examples=("these days I drink oat milk", "Thursdays I sing in a choir", "every morning I run"),
          counterexamples=("I usually run",)),
    # Another person or thing as subject.
    entry("speaker.other", r"^(?:he|she|they|this|that|there|you|your|the|a|an)\b", flags=_I, anchored=True,
          examples=("he works nights", "the train was late", "you said so"), counterexamples=("I work nights", "then I left")),
    # Someone named as the subject: "Priya on my team is vegan", "Jess keeps ..." (with an
    # apposition, "Jess, my flatmate, keeps", only where the whole sentence is read).
    entry("speaker.named",
          r"^(?!(?:I|We|It|This|That|There)\b)[A-Z][a-z]+(?: [A-Z][a-z]+)?"
          r"(?:(?:,[^,]{2,30},| (?:on|from|at|in) (?:my|our) \w+)\s+(?:is|was|has|had)\b"
          r"|\s+(?:keeps|says|said|thinks|wants|loves|likes|hates|swears)\b)",
          anchored=True,
          examples=("Priya on my team is vegan", "Jess keeps booking 8am meetings", "Jess, my flatmate, has two cats"),
          counterexamples=("It keeps crashing", "I keep forgetting", "Denver is nice")),
    # What someone says of the user is the user's: "my doctor says I'm anaemic"; so is what someone
    # did to the user's situation: "They moved me to the platform team".
    entry("speaker.reported_self",
          r"^(?:my )?(?:doctor|doc|dentist|gp|therapist|physio)\s+(?:says|said|thinks|told me)\s+(?:that\s+)?(?:i|my)\b"
          r"|^(?:they|\w+)\s+(?:just\s+)?(?:moved|put|switched|transferred|promoted|assigned|changed)\s+me\b",
          flags=_I, anchored=True,
          examples=("my doctor says I'm anaemic", "They moved me to the platform team"),
          counterexamples=("my doctor is great", "they moved house")),
    # "I don't own a car, so for a weekend away, ...": the question's, not the user's.
    entry("speaker.so_fragment", r"^\s*so\s+(?:for|in|on|at|with|to|about|what|how|which|when)\b(?!.*\bi\b)",
          flags=_I, anchored=True,
          examples=(" so for a weekend away", "so what should we cook"), counterexamples=("so I left", "so for now I wait")),
    # -- someone of the user's ----------------------------------------------------------------------
    # Named or aged: "my daughter Mia", "my son just turned 5".
    entry("relative.named", r"^(?i:my|our) \w+(?:'s name is| (?:is|just turned|turned) \d+| [A-Z][a-z]+\b)",
          anchored=True,
          examples=("my daughter Mia loves drawing", "my son just turned 5", "my dog's name is Max"),
          counterexamples=("my son likes trains", "my daughter and I bake")),
    # "My wife and I live in Denver": the user speaks, with someone.
    entry("relative.with_me", r"^(?i:my|our) \w+(?: \w+)? and (?:i|me)\b", flags=_I, anchored=True,
          examples=("My wife and I live in Denver", "my older sister and I share a flat"),
          counterexamples=("my wife lives in Denver",)),
    # -- changes of mind ----------------------------------------------------------------------------
    # Strong: it takes back what was said ("scratch that" retracts the user's last statement).
    entry("change.strong",
          r"\b(?:no longer|not \w+(?: \w+)? any ?more|any ?more|no more|done with|scratch that|changed my mind|"
          r"(?:switched|switching|moved|moving|changed|changing|migrated|migrating|went) (?:over )?(?:from|to)|"
          r"gave up|given up|quit|ditched|(?:went|go|going|gone|switched|moved) back to|stopped (?!by\b)|"
          r"uninstalled|deleted|cancell?ed|got rid of|sold (?:my|the)|"
          r"(?:should |let me |need to )?correct (?:that|myself))\b",
          flags=_I,
          examples=("I no longer eat meat", "scratch that", "I switched from VS Code to Neovim last month",
                    "not doing keto anymore", "I quit coffee"),
          counterexamples=("I eat meat", "I stopped by the shop", "I love my Mac")),
    # Weak: it says what holds from now on, which takes back only what it is about.
    entry("change.weak", r"\b(?:from now on|going forward|these days|now|moving to|going all in|instead|"
          r"starting (?:today|tomorrow|next \w+|\w+day))\b", flags=_I,
          examples=("from now on, bullet points", "these days I run", "I use Vim instead", "starting Monday I cycle"),
          counterexamples=("I run every day", "known for it")),
    # The old value a change of mind names: "no longer like dark mode", "switched from VS Code to ...".
    entry("change.old",
          r"\b(?:no longer (?:\w+ )?|not (?:doing|using|drinking|eating|into|on) |no more |done with |quit |gave up |"
          r"ditched |dropped |cut (?:out )?|stopped (?:using |drinking |eating |doing )?|uninstalled |deleted |"
          r"cancell?ed |got rid of |not \w+ing (?:her |him |them |my )?|(?:switched|moved|changed|migrated|went) "
          r"(?:over )?from )"
          r"(?P<old>(?![\w .+#'-]*\b(?:that|it|this|them|those)\b)(?!the moon\b)(?!(?:lol|haha|lmao|tbh|ngl)\b)"
          r"[\w .+#'-]{2,30}?)(?=\s*(?:any ?more|now|for good|after this|to\b|[,.;!?—–]|$))",
          flags=_I,
          examples=("I no longer like dark mode.", "I switched from VS Code to Neovim", "I quit coffee for good"),
          counterexamples=("I like dark mode.", "I quit it.", "I quit lol.")),
    # A change that happened once and holds since: "I switched my layout to Dvorak a few weeks ago".
    entry("change.new_state",
          r"^(?:i|we)(?: \w+ly| just| finally)? (?:switched|moved|changed|started|began|joined|adopted|became)\b",
          flags=_I, anchored=True,
          examples=("I switched my layout to Dvorak a few weeks ago", "we just moved to Leeds"),
          counterexamples=("I gave a talk", "they moved")),
    # Something that happened once: "I gave a talk at PyCon", "went hiking last weekend".
    entry("change.event", r"^(?:i|we)(?: \w+ly| just| finally| once)? (?:\w+ed|" + "|".join(_IRREGULAR_PAST) + r")\b"
          r"|\b(?:yesterday|last (?:night|week|weekend|month|year)|\w+ ago)\b", flags=_I,
          examples=("I gave a talk at PyCon", "went hiking last weekend", "I finally booked it"),
          counterexamples=("I teach chemistry", "I usually run")),
    # How often: a habit ("I usually study late").
    entry("change.habit", r"\b(?:usually|always|normally|typically|mostly|every (?:day|night|morning|evening|week|weekend)|"
          r"most (?:days|nights|mornings|evenings)|tend to)\b", flags=_I,
          examples=("I usually study late", "I run every morning", "I tend to skip lunch"),
          counterexamples=("I ran once", "every single time")),
    # Said to be in place of something: "I'm up at 5 to study instead" (not "these days", which
    # says only what holds now).
    entry("change.in_its_place", r"\binstead\b", flags=_I,
          examples=("I'm up at 5 to study instead",), counterexamples=("these days I study at 5",)),
    # -- corrections said on the spot -----------------------------------------------------------------
    # A slip corrected on the spot: "Lyon — sorry, Lille", "the 14th — no wait, the 15th".
    entry("correction.cue", r"^(?:sorry|no wait|wait no|wait|i mean|oops|actually no|correction)[\s,!.—–-]*$",
          flags=_I, anchored=True,
          examples=("sorry,", "no wait —", "I mean"), counterexamples=("sorry to hear that", "wait for me")),
    # The cue and the correction in one clause: "I mean Oakland", "sorry Lille" split at no comma.
    entry("correction.inline", r"^(?:sorry|no wait|wait no|i mean|oops|actually no)\s+(?P<fix>[^\W_].*)$",
          flags=_I, anchored=True,
          examples=("I mean Oakland", "sorry Lille", "no wait the 15th"), counterexamples=("sorry,", "I meant it")),
)
