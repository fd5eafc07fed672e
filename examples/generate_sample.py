#!/usr/bin/env python3
"""Generate a synthetic, bilingual (English / Chinese) agent-memory evaluation set.

Writes two JSONL files:

* ``sample_history.jsonl`` -- chat history, one message per line::

    {"user_id": "u01", "session_id": "u01-s03", "role": "user", "content": "...",
     "created_at": "2025-03-08T13:56:00+00:00", "name": "Caroline",
     "message_id": "u01:s03:m4", "org_id": "acme", "agent_id": "support-bot",
     "metadata": {"lang": "en"}}

* ``sample_questions.jsonl`` -- questions an agent might ask its memory::

    {"user_id": "u01", "question": "...", "evidence": ["u01:s03:m4"],
     "org_id": "acme", "category": "en", "kind": "preference"}

  ``category`` is the language ("en" or "zh"); ``kind`` is the fact type
  (preference, constraint, identity, project, event, flip).

What is in it: 36 users (18 English-speaking, 18 Chinese-speaking) in two orgs,
each with 8-14 sessions spread over 6-12 months of 2025. Every user has 5-8
planted durable facts (preferences, rules for the agent, identity, projects,
dated events). Each fact is stated once in a user turn; some are restated
later in other words; about a quarter are given as a short answer to an
assistant question (so the preceding turn matters); for a third of the users
one preference flips in a later session. Most messages are chit-chat noise,
plus distractor sentences that share words with facts without stating them.

The output is deterministic (fixed seed, standard library only, no network)::

    python examples/generate_sample.py [--out-dir examples] [--seed N]
"""

from __future__ import annotations

import argparse
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

SEED = 20250308
YEAR = 2025

# --------------------------------------------------------------------------
# Users, orgs, agents
# --------------------------------------------------------------------------

EN_NAMES = [
    "Caroline", "Melanie", "Jon", "Priya", "Marcus", "Hannah", "Diego", "Olivia", "Sam",
    "Fatima", "Ethan", "Grace", "Noah", "Zoe", "Liam", "Aisha", "Daniel", "Ruby",
]
ZH_NAMES = [
    "王芳", "李娜", "张伟", "刘洋", "陈静", "杨磊", "赵敏", "黄俊杰", "周婷",
    "吴强", "徐丽华", "孙浩", "马晓东", "朱琳", "胡斌", "郭雪", "林嘉怡", "何志远",
]
ORGS = ["acme", "globex"]
AGENTS = {"acme": ["support-bot", "dev-copilot"], "globex": ["helpdesk", "planner"]}
ASSISTANT_NAME = "Assistant"

# Every third user changes one preference later on.
FLIP_EVERY = 3
# Session sizes (in messages); sessions always alternate user/assistant.
SESSION_LENGTHS = [4, 6, 6, 8, 8, 10]
MAX_SESSION_LEN = 10
MAX_PLANTED_LOAD = 8  # messages of facts/distractors in one session
P_CONTEXTUAL = 0.22  # fact stated as a short answer to an assistant question
P_RESTATE = 0.35  # fact restated later in different words

# --------------------------------------------------------------------------
# Chit-chat noise: greetings, small talk, generic requests and answers
# --------------------------------------------------------------------------

# Greetings by time of day ("any" fits all); the assistant's replies are neutral.
GREETINGS = {
    "en": {
        "any": ["Hi!", "Hello again 👋", "Hey, got a minute?", "Hi there, quick one today.", "Back again, haha."],
        "morning": ["Hey, morning!", "Morning! Coffee hasn't kicked in yet, bear with me.", "Good morning."],
        "afternoon": ["Good afternoon.", "Afternoon! Quick question."],
        "evening": ["Evening! One more thing before I log off.", "Ugh, long day. Quick one before dinner."],
    },
    "zh": {
        "any": ["你好！", "在吗？", "嗨，又来麻烦你啦", "哈喽～"],
        "morning": ["早上好～", "早！今天有点事想请你帮忙。"],
        "afternoon": ["下午好", "下午好，问你个事儿。"],
        "evening": ["晚上好，问个小问题", "下班了，终于可以歇会儿了。"],
    },
}
FRIDAY_GREETINGS = {"en": ["Happy Friday!", "Happy Friday! Almost weekend."], "zh": ["周五快乐！", "终于周五了！"]}
GREETING_REPLIES = {
    "en": ["Hi! What can I do for you today?", "Hello! How can I help?",
           "Good to see you again. What's up?", "Of course — what do you need?", "Hey! Ready when you are."],
    "zh": ["你好！今天有什么可以帮你的？", "需要我做什么？", "在的，请说～", "没问题，请讲。", "嗨！随时为你服务。"],
}
CLOSERS = {
    "en": [
        ("haha thanks!", "Anytime! 😊"),
        ("Perfect, that's all for now.", "Great — have a good one!"),
        ("Thanks, super helpful.", "Glad it helped. Talk soon!"),
        ("Cool, cheers.", "Cheers! Ping me if anything else comes up."),
        ("ok that works, bye!", "Bye! Have a great rest of your day."),
        ("Thank you so much!", "You're welcome!"),
    ],
    "zh": [
        ("好的，谢谢！", "不客气，有需要随时找我～"),
        ("哈哈，太感谢了！", "不用谢😊"),
        ("行，就这样吧，拜拜", "拜拜，祝你今天顺利！"),
        ("明白了，多谢", "客气啦，随时找我。"),
        ("好嘞，辛苦了", "不辛苦，有问题再叫我！"),
    ],
}
SMALL_TALK = {
    "en": [
        ("It's absolutely pouring here today.",
         "Sounds like a good day to stay in. Anything I can help with while you're indoors?"),
        ("Nice, the sun finally came out.", "Lovely! Maybe a good excuse for a walk at lunch."),
        ("It's freezing this morning.", "Brr! A warm jumper sounds like the right move."),
        ("lol my internet just died for a minute", "Ha, the classic. Glad you're back! Where were we?"),
        ("Just checking in, nothing urgent.", "Always nice to hear from you! I'm here if anything comes up."),
        ("I'm so tired today, didn't sleep well.",
         "Sorry to hear that. Maybe keep today's plan light and tackle the hard stuff tomorrow?"),
        ("Thanks for yesterday, the summary was spot on.", "Happy it was useful!"),
        ("My laptop fan is so loud today.",
         "Might be worth checking which process is eating the CPU — Activity Monitor or `top` will tell you quickly."),
        ("Tell me a fun fact.", "Octopuses have three hearts and blue blood."),
        ("Finally cleared my inbox, feels amazing.", "Inbox zero! Enjoy it while it lasts 😄"),
    ],
    "zh": [
        ("今天天气不错，阳光挺好的。", "确实是出门走走的好天气！有什么需要我帮忙的吗？"),
        ("外面下大雨了，出门忘带伞。", "那可真糟糕，注意别着凉。要不要我帮你把今天的待办整理一下？"),
        ("今天好冷啊。", "多穿点衣服，别冻着了。"),
        ("哈哈，刚才网断了一下。", "常有的事～欢迎回来，我们继续吧。"),
        ("今天好累啊，昨晚没睡好。", "辛苦了，今天不妨把难的任务挪到明天，先处理些轻松的事情。"),
        ("没什么事，就是来打个招呼。", "哈哈，谢谢惦记！有需要随时叫我。"),
        ("谢谢你昨天整理的总结，很有用。", "能帮上忙就好！"),
        ("电脑风扇今天特别吵。", "可能有进程占用CPU比较高，打开任务管理器看看是哪个程序。"),
        ("讲个冷知识吧。", "章鱼有三颗心脏，血液是蓝色的。"),
        ("最近雾霾好严重。", "出门记得戴口罩，室内可以开一下空气净化器。"),
        ("哈哈哈，今天被同事的段子笑死了。", "哈哈，有好心情工作效率也会更高！"),
        ("今天终于把积压的工单清完了！", "太棒了，给自己点个赞！"),
    ],
}
GENERIC_REQUESTS = {
    "en": [
        ("Can you draft a short note to the team saying the retro moves to 3pm?",
         'Sure: "Hi all — quick heads-up that today\'s retro has moved to 3pm. Same link as usual. Thanks!"'),
        ("How do I write a good commit message?",
         "Keep the first line short (around 50 characters) and in the imperative mood, leave a blank line, then explain the why in the body."),
        ("Give me a quick tip for staying focused in the afternoon.",
         "Try a 25-minute focus block with notifications off, then a 5-minute break away from the screen."),
        ("Any idea how to politely decline a meeting?",
         'Something like: "Thanks for the invite — I don\'t think I\'m needed for this one, but please share notes and I\'ll follow up if anything comes up for me."'),
        ("What's the difference between a list and a tuple in Python?",
         "Lists are mutable; tuples are immutable and often used for fixed-size records. Tuples can also be dict keys."),
        ("Summarise the main points of a good one-on-one.",
         "Let the report set the agenda, talk about blockers and growth, not just status, and end with clear follow-ups."),
        ("How long should a standup take?",
         "Ideally 15 minutes or less. If something needs discussion, take it offline with just the people involved."),
        ("Can you suggest a name for a Slack channel about the offsite?",
         "How about #offsite-2025, #team-getaway, or #offsite-planning?"),
        ("Is it 'affect' or 'effect' here: the change will ___ everyone?",
         '"Affect" — it\'s the verb. "Effect" is usually the noun.'),
        ("I need a polite reminder email for an unpaid invoice.",
         'Here\'s a draft: "Hi Sam, just a friendly reminder that invoice #1042 was due last week. Could you let me know when we can expect payment? Thanks!"'),
        ("What's a good way to structure a weekly review?",
         "Three questions work well: what got done, what got stuck and why, and what the top three priorities are for next week."),
        ("Explain what a race condition is in one sentence.",
         "It's a bug where the result depends on the unpredictable timing of two or more operations touching shared state."),
        ("Can you convert 72 Fahrenheit to Celsius?", "72°F is about 22.2°C."),
        ("Write a one-line birthday message for a coworker.",
         '"Happy birthday! Hope your day is as great as your code reviews are thorough 🎉"'),
        ("What are some good questions to ask at the end of an interview?",
         "Ask what success looks like in the first 90 days, what the team's biggest challenge is right now, and how decisions get made."),
        ("How do I undo my last git commit but keep the changes?",
         "Run `git reset --soft HEAD~1` — the commit is removed and your changes stay staged."),
        ("What's a good icebreaker for a remote team call?",
         'Try "What\'s one small thing that made your week better?" It\'s light and gets people talking.'),
        ("Can you proofread this: 'Their going to send the report tomorow.'",
         'Corrected: "They\'re going to send the report tomorrow."'),
        ("Remind me what OKR stands for?", "Objectives and Key Results."),
        ("What's a quick way to split 137.50 between 5 people?", "That's 27.50 each."),
        ("Can you give me three ideas for a lunch-and-learn topic?",
         "Sure: writing better docs, an intro to observability, and a live demo of a productivity tool someone on the team loves."),
        ("What should I put in a project kickoff doc?",
         "Goals, non-goals, stakeholders, milestones, risks, and how you'll measure success."),
        ("How do I say 'thank you' in Japanese?", '"Arigatou gozaimasu" is the polite form.'),
        ("What's a good way to start a difficult conversation with a colleague?",
         'Open with your intent: "I want us to work well together, and there\'s something I\'d like to talk through." Then stick to specific examples.'),
        ("Can you make this shorter: 'At this point in time we are not in a position to proceed.'",
         '"We can\'t proceed yet."'),
        ("What's the difference between latency and throughput?",
         "Latency is how long one request takes; throughput is how many requests you handle per unit of time."),
        ("Should I use tabs or spaces?",
         "Whatever your project's formatter enforces — consistency matters more than the choice itself."),
        ("Give me a regex for a 5-digit zip code.", "`^\\d{5}$` matches exactly five digits."),
        ("How do I politely ask for a deadline extension?",
         "Ask early and be specific: explain what's blocking you, propose a new date, and say what you can deliver in the meantime."),
        ("Quick sanity check: is 2025 a leap year?", "No — 2025 isn't divisible by 4, so February has 28 days."),
        ("What's a good template for meeting notes?",
         "Attendees, agenda, decisions, and action items with owners and dates. Put the decisions at the top."),
        ("How many hours is 3 days?", "72 hours."),
    ],
    "zh": [
        ("帮我写一段周会通知，说改到下午三点。",
         "好的：“各位好，本周周会改到下午三点举行，会议链接不变，请大家准时参加，谢谢！”"),
        ("Git 怎么撤销上一次提交但保留修改？", "可以用 `git reset --soft HEAD~1`，提交会被撤销，修改仍然保留在暂存区。"),
        ("怎么写一封礼貌的催款邮件？",
         "可以这样写：“您好，温馨提醒一下，编号1042的发票已于上周到期，方便告知预计的付款时间吗？谢谢！”"),
        ("下午老是犯困，有什么办法提神？", "可以试试番茄工作法：专注25分钟，休息5分钟，休息时起身走动一下。"),
        ("帮我想几个团建活动的点子。", "可以考虑：剧本杀、户外徒步、烹饪课，或者一起去做陶艺。"),
        ("“的”“地”“得”怎么区分来着？", "简单记：名词前用“的”，动词前用“地”，动词后面接补语用“得”。"),
        ("站会一般开多久比较合适？", "最好控制在15分钟以内，需要展开讨论的问题会后单独约相关的人。"),
        ("帮我把这句话改得简洁一点：“在目前这个阶段我们暂时还没有办法继续推进。”", "可以改成：“目前还无法推进。”"),
        ("什么是竞态条件？一句话解释。", "多个操作并发访问共享数据，结果取决于执行的先后顺序，这就是竞态条件。"),
        ("周报一般怎么写比较清楚？", "可以分三部分：本周完成了什么、遇到了哪些问题、下周的重点计划。"),
        ("帮我写一句给同事的生日祝福。", "“生日快乐！愿你新的一岁代码无bug，天天好心情🎂”"),
        ("面试最后可以问面试官什么问题？", "可以问：前三个月怎样算做得好？团队目前最大的挑战是什么？"),
        ("72华氏度是多少摄氏度？", "大约22.2摄氏度。"),
        ("OKR 是什么的缩写？", "Objectives and Key Results，目标与关键成果。"),
        ("五个人平分137.5元，每人多少？", "每人27.5元。"),
        ("项目启动文档里应该写些什么？", "目标、非目标、相关人、里程碑、风险，以及衡量成功的指标。"),
        ("和同事有分歧，怎么开口沟通比较好？",
         "先表明善意，比如“我希望我们合作得更顺利，有件事想和你聊聊”，然后就事论事，举具体例子。"),
        ("延迟和吞吐量有什么区别？", "延迟是单个请求花多长时间，吞吐量是单位时间内能处理多少请求。"),
        ("缩进用 Tab 还是空格？", "跟项目的格式化工具保持一致就好，统一比选哪个更重要。"),
        ("2025年是闰年吗？", "不是，2025不能被4整除，二月只有28天。"),
        ("会议纪要用什么模板好？", "参会人、议程、结论、待办事项（负责人和截止日期），结论放在最前面。"),
        ("怎么委婉地拒绝一个会议邀请？",
         "可以说：“感谢邀请，这个会我可能不是必要参与者，麻烦会后同步一下纪要，有需要我再跟进。”"),
        ("帮我起个群名，讨论年会节目的。", "可以叫“年会节目筹备组”、“年会C位冲刺群”或者“今年也要整活”。"),
        ("如何礼貌地申请延期？", "尽早说明，讲清楚卡在哪里，给出新的日期，并说明在此期间能先交付什么。"),
        ("正则表达式怎么匹配6位邮编？", "`^\\d{6}$` 就可以匹配恰好6位数字。"),
        ("日语的“谢谢”怎么说？", "“ありがとうございます”（arigatou gozaimasu），比较礼貌的说法。"),
        ("一对一沟通应该聊些什么？", "让对方来定议题，多聊阻碍和成长，不只是汇报进度，最后明确后续行动。"),
        ("帮我检查一下这句话有没有错别字：“我们明天在讨论这个问题。”", "应该是“我们明天再讨论这个问题。”，“在”要改成“再”。"),
        ("有什么适合远程团队的破冰问题？", "可以问“这周有什么小事让你开心？”轻松又容易聊起来。"),
        ("Python 里列表和元组有什么区别？", "列表可变，元组不可变；元组可以作为字典的键，常用于表示固定结构的数据。"),
        ("3天是多少小时？", "72小时。"),
    ],
}
DISTRACTOR_REPLIES = {
    "en": [
        "Ha, fair enough!", "Oh interesting — thanks for sharing.", "Haha, sounds like quite the story.",
        "Fair! People have strong opinions about that.", "Oh wow. Anything I can help with today?",
    ],
    "zh": ["哈哈，有意思。", "原来如此～", "哈哈，确实。", "这样啊，挺有意思的。", "哈哈，理解理解。"],
}
# Assistant acknowledgements after a fact (deliberately generic: no fact values).
ACKS = {
    "en": {
        "preference": ["Good to know — I'll remember that.", "Noted! I'll keep that in mind.",
                       "Got it, thanks for telling me.", "Nice, noted for future suggestions."],
        "constraint": ["Understood — I'll stick to that from now on.", "Got it. I'll make sure to follow that.",
                       "Noted, that's a firm rule on my side now.", "Absolutely, I'll respect that."],
        "identity": ["Thanks for sharing! That helps me tailor things.", "Oh nice, good to know a bit more about you.",
                     "Got it — thanks for the context.", "Lovely, thanks for telling me!"],
        "project": ["Sounds like a great project — happy to help with it anytime.",
                    "Nice! Let me know if you want a hand with design or reviews.",
                    "Cool stack. Shout if you hit any snags."],
        "event": ["Thanks for the heads-up, noted.", "Got it, I'll keep that date in mind.",
                  "Oh wow, thanks for letting me know.", "Noted — let me know if you need anything around that."],
        "flip": ["Ah, good to know — I'll update my notes.", "Nice switch! Updated.",
                 "Got it, I'll go with that from now on."],
    },
    "zh": {
        "preference": ["好的，记住了。", "收到，以后会留意的。", "明白，谢谢告诉我～", "好嘞，之后推荐的时候会考虑这一点。"],
        "constraint": ["明白，以后一定照做。", "收到，这条我会严格遵守。", "好的，记下了。", "没问题，就按你说的来。"],
        "identity": ["谢谢分享！这样我能更好地帮你。", "原来如此，了解了～", "好的，收到。", "挺好的，谢谢告诉我。"],
        "project": ["听起来很有意思，需要帮忙随时说。", "不错的技术选型！遇到问题可以找我。", "好的，记下了，祝项目顺利！"],
        "event": ["好的，知道了，谢谢提醒。", "收到，这个日期我记下了。", "了解，有需要随时找我。"],
        "flip": ["好的，已经更新了。", "明白，以后按新的来。", "收到，记下这个变化了。"],
    },
}

# --------------------------------------------------------------------------
# Slot values. Each value is a dict of template fields; plain strings become {"v": s}.
# --------------------------------------------------------------------------

PROG_LANGS = ["Rust", "Go", "Python", "TypeScript", "Kotlin", "Elixir", "Java", "C#"]
# (language, English wording, Chinese wording): a project's stack matches the user's language.
STACKS = [
    ("Rust", "Axum and Postgres", "Axum + Postgres"),
    ("Rust", "a Rust CLI with SQLite", "Rust 命令行工具 + SQLite"),
    ("Go", "Go microservices on Kubernetes", "Go 微服务，部署在 Kubernetes 上"),
    ("Go", "Go with gRPC and Redis", "Go + gRPC + Redis"),
    ("Python", "FastAPI and Postgres", "FastAPI + Postgres"),
    ("Python", "Django and Celery", "Django + Celery"),
    ("TypeScript", "Next.js with Supabase", "Next.js + Supabase"),
    ("TypeScript", "React Native and Firebase", "React Native + Firebase"),
    ("Kotlin", "Ktor and MongoDB", "Ktor + MongoDB"),
    ("Elixir", "Phoenix LiveView and Postgres", "Phoenix LiveView + Postgres"),
    ("Java", "Spring Boot and Kafka", "Spring Boot + Kafka"),
    ("C#", "ASP.NET Core and SQL Server", "ASP.NET Core + SQL Server"),
]
PROJECT_NAMES = {
    "en": ["Atlas", "Bluebird", "Harbor", "Nimbus", "Orchard", "Quill", "Sextant", "Lighthouse", "Juniper", "Tessera"],
    "zh": ["天枢", "青鸟", "北斗", "星河", "灯塔", "锦鲤", "玄武", "飞鱼"],
}
PROJECT_PURPOSES = {
    "en": ["an internal expense tool", "a customer-support chatbot", "a log analytics pipeline",
           "a booking app for climbing gyms", "a recipe recommender", "a small e-commerce storefront"],
    "zh": ["内部报销系统", "智能客服机器人", "日志分析平台", "微信小程序商城", "健身房预约应用", "菜谱推荐服务"],
}

VALUES: dict[str, dict[str, list[Any]]] = {
    "prog_lang": {"en": PROG_LANGS, "zh": PROG_LANGS},
    "editor": {
        "en": ["VS Code", "Neovim", "Emacs", "IntelliJ IDEA", "Sublime Text", "Zed", "PyCharm", "Helix"],
        "zh": ["VS Code", "Neovim", "Emacs", "IntelliJ IDEA", "Sublime Text", "Zed", "PyCharm", "Helix"],
    },
    "food": {
        "en": ["sushi", "Thai green curry", "ramen", "tacos", "Neapolitan pizza", "pho", "dim sum",
               "paneer tikka", "falafel wraps"],
        "zh": ["火锅", "麻辣烫", "小笼包", "兰州拉面", "北京烤鸭", "酸菜鱼", "螺蛳粉", "煎饼果子", "肠粉", "饺子"],
    },
    "drink": {
        "en": ["oat-milk flat white", "green tea", "black coffee", "chai latte", "sparkling water",
               "matcha latte", "cold brew", "Earl Grey"],
        "zh": ["美式咖啡", "乌龙茶", "龙井", "燕麦拿铁", "奶茶", "普洱", "柠檬水", "椰子水"],
    },
    "meeting_time": {
        "en": ["first thing in the morning, before 10", "late morning, around 11", "right after lunch",
               "late afternoon, after 4"],
        "zh": ["上午九点到十点之间", "上午十一点左右", "午饭后", "下午四点以后"],
    },
    "no_meeting_day": {
        "en": ["Fridays", "Mondays", "Wednesday afternoons", "Thursday mornings"],
        "zh": ["周五", "周一", "周三下午", "周四上午"],
    },
    "answer_format": {
        "en": ["bullet points", "three sentences or fewer", "plain text with no emoji", "numbered steps"],
        "zh": ["用要点列表", "控制在三句话以内", "只用纯文字，不要表情", "分步骤编号"],
    },
    "reminder_channel": {
        "en": ["email", "Slack", "SMS", "Microsoft Teams"],
        "zh": ["邮件", "微信", "短信", "钉钉"],
    },
    "diet": {
        "en": ["vegetarian", "allergic to peanuts", "allergic to shellfish", "lactose intolerant"],
        "zh": ["吃素", "对花生过敏", "不吃辣", "对海鲜过敏"],
    },
    "job": {
        "en": [{"v": "a data engineer", "bare": "data engineer"},
               {"v": "a product designer", "bare": "product designer"},
               {"v": "a high-school chemistry teacher", "bare": "high-school chemistry teacher"},
               {"v": "a nurse", "bare": "nurse"},
               {"v": "a site reliability engineer", "bare": "site reliability engineer"},
               {"v": "a backend developer", "bare": "backend developer"},
               {"v": "a UX researcher", "bare": "UX researcher"},
               {"v": "an accountant", "bare": "accountant"}],
        "zh": ["数据工程师", "产品设计师", "高中化学老师", "护士", "运维工程师", "后端开发", "用户研究员", "会计"],
    },
    "city": {
        "en": ["Seattle", "Austin", "Manchester", "Toronto", "Melbourne", "Dublin", "Denver", "Edinburgh"],
        "zh": ["杭州", "成都", "深圳", "北京", "上海", "南京", "武汉", "西安"],
    },
    "pet": {
        "en": [{"kind": "dog", "pname": "Max"}, {"kind": "cat", "pname": "Luna"},
               {"kind": "golden retriever", "pname": "Biscuit"}, {"kind": "tabby cat", "pname": "Mochi"},
               {"kind": "rabbit", "pname": "Clover"}, {"kind": "parrot", "pname": "Kiwi"},
               {"kind": "beagle", "pname": "Pepper"}, {"kind": "border collie", "pname": "Scout"}],
        "zh": [{"kind": "猫", "pname": "咪咪"}, {"kind": "狗", "pname": "豆豆"}, {"kind": "柯基", "pname": "旺财"},
               {"kind": "橘猫", "pname": "大橘"}, {"kind": "兔子", "pname": "雪球"}, {"kind": "鹦鹉", "pname": "小绿"},
               {"kind": "金毛", "pname": "可乐"}, {"kind": "布偶猫", "pname": "年糕"}],
    },
    "family": {
        "en": ["two kids, aged 5 and 8", "a newborn daughter", "a teenage son", "twin boys who just started school"],
        "zh": ["两个孩子，一个五岁一个八岁", "一个刚出生的女儿", "一个上高中的儿子", "一对刚上小学的双胞胎儿子"],
    },
    "trip": {
        "en": ["Lisbon", "Tokyo", "Reykjavik", "Cape Town", "Vancouver", "Kyoto", "Marrakech", "Buenos Aires"],
        "zh": ["大理", "东京", "三亚", "冰岛", "清迈", "西双版纳", "新疆", "京都"],
    },
    "incident": {
        "en": [{"service": "payments service", "cause": "an expired TLS certificate"},
               {"service": "login API", "cause": "a bad config push"},
               {"service": "search cluster", "cause": "a disk that filled up"},
               {"service": "checkout page", "cause": "a database migration that locked a table"},
               {"service": "notification worker", "cause": "a memory leak"}],
        "zh": [{"service": "支付服务", "cause": "证书过期"}, {"service": "登录接口", "cause": "配置推错了"},
               {"service": "搜索集群", "cause": "磁盘写满"}, {"service": "下单页面", "cause": "数据库迁移锁表"},
               {"service": "消息推送服务", "cause": "内存泄漏"}],
    },
    "purchase": {
        "en": [{"item": "standing desk", "a_item": "a standing desk"},
               {"item": "used Subaru Outback", "a_item": "a used Subaru Outback"},
               {"item": "Fujifilm X100V camera", "a_item": "a Fujifilm X100V camera"},
               {"item": "road bike", "a_item": "a road bike"},
               {"item": "espresso machine", "a_item": "an espresso machine"},
               {"item": "noise-cancelling headphones", "a_item": "a pair of noise-cancelling headphones"},
               {"item": "e-reader", "a_item": "an e-reader"}],
        "zh": [{"item": "一张升降桌", "bare": "升降桌"}, {"item": "一辆二手特斯拉 Model 3", "bare": "特斯拉"},
               {"item": "一台富士相机", "bare": "富士相机"}, {"item": "一辆公路自行车", "bare": "公路自行车"},
               {"item": "一台咖啡机", "bare": "咖啡机"}, {"item": "一副降噪耳机", "bare": "降噪耳机"},
               {"item": "一个电子书阅读器", "bare": "电子书阅读器"}],
    },
}

# Favourite foods that would contradict a dietary constraint.
DIET_CONFLICTS: dict[str, set[str]] = {
    "vegetarian": {"sushi", "pho", "ramen", "dim sum", "tacos"},
    "allergic to peanuts": {"Thai green curry"},
    "allergic to shellfish": {"sushi", "dim sum"},
    "lactose intolerant": {"Neapolitan pizza"},
    "吃素": {"北京烤鸭", "酸菜鱼", "螺蛳粉", "小笼包", "兰州拉面", "火锅"},
    "不吃辣": {"火锅", "麻辣烫", "酸菜鱼", "螺蛳粉"},
    "对海鲜过敏": {"酸菜鱼"},
    "对花生过敏": set(),
}

# --------------------------------------------------------------------------
# Fact templates, per slot and language.
#   state    -- direct statements (user turn = evidence)
#   context  -- (user lead-in, assistant question, short user answer = evidence)
#   restate  -- later near-duplicate statement in other words
#   flip     -- change of mind ({old} -> {new}); only for flippable slots
#   q_kw     -- questions sharing keywords with the statements
#   q_para   -- paraphrased questions with few shared words
#   q_flip   -- questions about the current value after a flip
#   distract -- sentences sharing words with the fact without stating it ({o...} = another value)
# Question placeholders: {who} (name or "the user"/"用户"), {whos} (possessive).
# --------------------------------------------------------------------------

SLOTS: dict[str, dict[str, Any]] = {
    "prog_lang": {
        "kind": "preference", "flippable": False,
        "en": {
            "state": ["For backend work I write almost everything in {v} these days.",
                      "{V} is my go-to language — any new service I start, I start in {v}.",
                      "Honestly I'm happiest writing {v}; it's my favourite language by far."],
            "context": [("Can you recommend a logging library for our new service?",
                         "Happy to — which language do you use for the backend?", "{V} mostly."),
                        ("I want to set up a linter for my side project.",
                         "Sure. What language are you writing it in?", "{V}, as usual."),
                        ("Could you suggest a good testing framework?",
                         "Of course. Which language should I look at?", "Mostly {v}, yeah.")],
            "restate": ["As I mentioned, {v} is really the only language I enjoy writing.",
                        "Just so you know for future suggestions: default to {v} examples for me."],
            "q_kw": ["Which programming language does {who} prefer for backend work?",
                     "What language does {who} write backend services in?"],
            "q_para": ["If I generate sample code for {who}, what should it be written in?",
                       "What does {who} usually code in?"],
            "distract": ["My cousin just started learning {o} at uni and keeps sending me memes about it.",
                         "There was a heated thread at work today about {o} vs everything else, I stayed out of it.",
                         "A recruiter pinged me about a {o} role, not really my thing though."],
        },
        "zh": {
            "state": ["后端我现在基本都用{v}写。", "我最喜欢的编程语言是{v}，新服务一般都用它来写。",
                      "能选的话我肯定用{v}，这门语言写起来最顺手。"],
            "context": [("帮我推荐个日志库吧，新服务要用。", "好的，你后端一般用什么语言？", "主要是{v}吧。"),
                        ("我想给自己的小项目配个代码检查工具。", "没问题，项目是用什么语言写的？", "{v}，老样子。")],
            "restate": ["之前说过，我最习惯的编程语言还是{v}。", "以后给我的示例代码默认用{v}就行。"],
            "q_kw": ["{who}后端一般用什么语言写？", "{who}最喜欢的编程语言是什么？"],
            "q_para": ["给{who}写示例代码应该用哪种语言？", "{who}平时写代码最顺手的是哪门语言？"],
            "distract": ["我表弟在大学里学{o}，天天跟我吐槽。", "今天群里又在争论{o}好不好用，我没掺和。",
                         "有猎头找我聊一个{o}的岗位，感觉不太适合我。"],
        },
    },
    "editor": {
        "kind": "preference", "flippable": True,
        "en": {
            "state": ["I do all my coding in {v}.", "My editor of choice is {v} — I've customised it way too much.",
                      "{V} is open on my screen basically all day, it's the only editor I use."],
            "context": [("Can you suggest some keyboard shortcuts to speed me up?",
                         "Sure! Which editor are you using at the moment?", "{V}."),
                        ("I want a nicer setup for writing Markdown.",
                         "Happy to help. What editor do you normally work in?", "Still {v}.")],
            "restate": ["Everything I write goes through {v}, like I said — no plans to change that.",
                        "When you give me shortcuts, assume {v}."],
            "flip": ["Actually I switched from {old} to {new} last month.",
                     "Quick update: I dropped {old}, I'm on {new} full-time now."],
            "q_kw": ["Which code editor does {who} use?", "What editor does {who} prefer for coding?"],
            "q_para": ["What's {whos} IDE?", "If I share keyboard shortcuts with {who}, which tool should they be for?"],
            "q_flip": ["Which editor does {who} use now?", "What is {whos} current IDE?"],
            "distract": ["My teammate keeps trying to convert me to {o}, it's become a running joke.",
                         "Watched a conference talk where someone live-coded in {o}, pretty impressive."],
        },
        "zh": {
            "state": ["我写代码全都在{v}里。", "我平时用的编辑器是{v}，插件配了一大堆。"],
            "context": [("有没有什么快捷键能提高效率？", "有的！你现在用什么编辑器？", "{v}。"),
                        ("我想找个写 Markdown 舒服一点的方案。", "可以的，你平时在哪个编辑器里写东西？", "一直是{v}。")],
            "restate": ["我说过的，所有代码都在{v}里写，暂时不打算换。", "以后给我推荐快捷键就按{v}来。"],
            "flip": ["其实我上个月已经从{old}换成{new}了。", "更新一下：写代码我不用{old}了，现在全面转到{new}。"],
            "q_kw": ["{who}用什么代码编辑器？", "{who}平时在哪个编辑器里写代码？"],
            "q_para": ["{who}的IDE是哪个？", "给{who}推荐快捷键，应该按哪个工具来？"],
            "q_flip": ["{who}现在用的是哪个编辑器？", "{who}目前写代码用什么工具？"],
            "distract": ["同事一直劝我试试{o}，都成了组里的梗了。", "看了个技术分享，讲者现场用{o}写代码，挺厉害的。"],
        },
    },
    "food": {
        "kind": "preference", "flippable": True,
        "en": {
            "state": ["My favourite food is {v}, I could eat it every single day.",
                      "If I'm ordering in, it's {v} nine times out of ten."],
            "context": [("We're doing a team lunch on Thursday, can you help me pick a place?",
                         "Sure! What kind of food do you like best?", "{V}, always."),
                        ("I'm starving and can't decide what to order.",
                         "Ha, what's your usual favourite?", "{V}, honestly.")],
            "restate": ["You know me, {v} is still my number one comfort food.",
                        "I'll say it again: nothing beats {v}."],
            "flip": ["I've totally gone off {old} lately — {new} is my new favourite.",
                     "Plot twist: I'm over {old}, these days I'm all about {new}."],
            "q_kw": ["What is {whos} favourite food?", "What food does {who} order most often?"],
            "q_para": ["What should we get {who} for a team lunch?", "Which dish does {who} love most?"],
            "q_flip": ["What is {whos} favourite food now?", "Which dish is {who} into these days?"],
            "distract": ["My sister can't stand {o}, which I will never understand.",
                         "There's a new {o} place opening near the office, everyone's talking about it."],
        },
        "zh": {
            "state": ["我最喜欢吃{v}，一周吃三次都不腻。", "点外卖的话我十次有九次点{v}。"],
            "context": [("周四部门聚餐，帮我挑个地方吧。", "好呀，你最喜欢吃什么？", "{v}！"),
                        ("好饿啊，不知道点什么。", "哈哈，你平时最爱吃啥？", "{v}吧，百吃不厌。")],
            "restate": ["还是那句话，{v}永远是我最喜欢吃的。", "说真的，吃什么都比不上{v}。"],
            "flip": ["最近吃{old}吃腻了，现在最爱{new}。", "口味变了，{old}不怎么吃了，现在天天想着{new}。"],
            "q_kw": ["{who}最喜欢吃什么？", "{who}点外卖一般点什么？"],
            "q_para": ["聚餐的时候给{who}订什么比较好？", "{who}百吃不厌的是哪道菜？"],
            "q_flip": ["{who}现在最爱吃什么？", "{who}最近的口味偏好是什么菜？"],
            "distract": ["我姐一点都不吃{o}，真搞不懂。", "公司楼下新开了一家{o}店，大家都在排队。"],
        },
    },
    "drink": {
        "kind": "preference", "flippable": True,
        "en": {
            "state": ["I basically run on {v} — that's my drink from morning to mid-afternoon.",
                      "My usual café order is {v}, every single time."],
            "context": [("Can you add a drinks order to tomorrow's workshop booking?",
                         "Sure — what do you like to drink?", "{V}, please."),
                        ("Grabbing something before the meeting.",
                         "Ha, what do you normally get?", "{V}, every time.")],
            "restate": ["Same as always for me: {v}.", "If anyone asks, {v} is my drink — that hasn't changed."],
            "flip": ["I've cut back on {old}, it's {new} for me now.",
                     "Update: switched from {old} to {new}, feeling much better for it."],
            "q_kw": ["What drink does {who} usually order?", "What does {who} like to drink?"],
            "q_para": ["What should I grab for {who} from the coffee shop?", "What beverage is {who} a fan of?"],
            "q_flip": ["What does {who} drink these days?", "What's {whos} current go-to beverage?"],
            "distract": ["My manager gets through an absurd amount of {o} every day, no idea how he sleeps.",
                         "The café downstairs started doing {o}, there's a queue out the door."],
        },
        "zh": {
            "state": ["我最喜欢的饮料是{v}，平时从早喝到下午。", "我平时只喝{v}，别的饮料都不太喝。"],
            "context": [("明天的工作坊帮我顺便订一下饮料。", "好的，你喜欢喝什么？", "{v}，谢谢。"),
                        ("开会前想买杯喝的。", "你平时一般点什么？", "{v}，雷打不动。")],
            "restate": ["饮料我还是老样子，{v}。", "要是有人问，我喝的一直是{v}。"],
            "flip": ["我最近不喝{old}了，改喝{new}。", "更新一下：{old}戒了，现在每天一杯{new}。"],
            "q_kw": ["{who}平时喝什么？", "{who}最喜欢喝什么饮料？"],
            "q_para": ["去咖啡店给{who}带一杯，买什么好？", "给{who}点饮料应该点哪种？"],
            "q_flip": ["{who}现在喝什么？", "{who}最近改喝什么了？"],
            "distract": ["我们领导一天要喝好几杯{o}，真不知道他晚上怎么睡得着。", "楼下咖啡店新出了{o}，排队的人特别多。"],
        },
    },
    "meeting_time": {
        "kind": "preference", "flippable": False,
        "en": {
            "state": ["Whenever possible, book my meetings {v}.",
                      "I'm at my sharpest {v}, so that's my preferred meeting slot."],
            "context": [("I need to set up a sync with the design team.",
                         "Sure. What time of day do you prefer for meetings?", "{V}, ideally.")],
            "restate": ["Again, for meetings, {v} works best for me."],
            "q_kw": ["What is {whos} preferred meeting time?", "What time of day does {who} like meetings?"],
            "q_para": ["What's the best slot to book a call with {who}?", "When is {who} most alert for a sync?"],
            "distract": ["Our all-hands got moved to {o} this quarter, nobody asked me."],
        },
        "zh": {
            "state": ["开会的话我最喜欢安排在{v}。", "我{v}状态最好，会议尽量约在这个时间。"],
            "context": [("我得约设计组开个同步会。", "好的，你一般喜欢什么时间开会？", "{v}吧。")],
            "restate": ["再说一次，会议放在{v}对我最合适。"],
            "q_kw": ["{who}喜欢什么时间开会？", "给{who}约会议，安排在什么时候最好？"],
            "q_para": ["{who}一天中什么时段状态最好？", "什么时段和{who}约同步最合适？"],
            "distract": ["我们的全员大会这季度改到{o}了，没人问过我的意见。"],
        },
    },
    "no_meeting_day": {
        "kind": "constraint", "flippable": False,
        "en": {
            "state": ["Rule for you: never schedule meetings on {v}.",
                      "Please don't ever book anything on {v} — I keep that time completely clear for deep work."],
            "context": [("Can you help me plan next week's calendar?",
                         "Sure. Is there any time you want me to keep free of meetings?", "{V}. No meetings then, ever.")],
            "restate": ["Just a reminder: {v} stay meeting-free, no exceptions."],
            "q_kw": ["On which day should meetings never be scheduled for {who}?",
                     "When does {who} not want any meetings booked?"],
            "q_para": ["Is there a time {who} keeps blocked for focused work?",
                       "Which part of the week is off-limits for calls with {who}?"],
            "distract": ["Ha, my partner's team has a no-meetings rule on {o}, so jealous.",
                         "The cleaners come on {o}, so the office is chaos then."],
        },
        "zh": {
            "state": ["以后不要在{v}给我安排会议。", "{v}我要专心写代码，千万别给我安排任何会议。"],
            "context": [("帮我排一下下周的日程吧。", "好的，有没有哪段时间需要我空出来、不排会议？", "{v}，千万别排会。")],
            "restate": ["提醒一下：{v}一律不开会，没有例外。"],
            "q_kw": ["哪天不能给{who}安排会议？", "{who}哪天不想开会？"],
            "q_para": ["{who}哪段时间要留出来专心干活？", "给{who}排日程时，哪个时间段要空着？"],
            "distract": ["我对象他们组规定{o}不开会，好羡慕。", "保洁阿姨{o}来打扫，办公室那时候特别乱。"],
        },
    },
    "answer_format": {
        "kind": "constraint", "flippable": False,
        "en": {
            "state": ["From now on, always answer me in {v}.",
                      "One rule: keep your answers to {v}, please. Much easier for me to scan."],
            "context": [("Your last answer was a bit hard to skim.",
                         "Sorry about that! How would you like me to format answers?", "{V}, please. Always.")],
            "restate": ["Please stick to {v} when you reply, like I asked before."],
            "q_kw": ["How should answers to {who} be formatted?", "What answer format does {who} want?"],
            "q_para": ["What response style has {who} asked the assistant to use?",
                       "Any rules about how to write replies for {who}?"],
            "distract": ["My coworker writes every email as {o}, it's kind of her signature."],
        },
        "zh": {
            "state": ["以后回答我的时候请{v}，这是我对格式的要求。", "有个要求：你的回复一律{v}，方便我快速看。"],
            "context": [("你上次的回答有点难读。", "抱歉！你希望我的回答用什么格式？", "{v}吧，以后都这样。")],
            "restate": ["像之前说的，回复请{v}。"],
            "q_kw": ["回答{who}的问题应该用什么格式？", "{who}对回复格式有什么要求？"],
            "q_para": ["{who}希望助手怎么组织答案？", "给{who}写东西时有什么规矩？"],
            "distract": ["我同事写邮件总是喜欢{o}，都成她的风格了。"],
        },
    },
    "reminder_channel": {
        "kind": "constraint", "flippable": False,
        "en": {
            "state": ["Only ever send me reminders via {v}, nothing else.",
                      "Important: reminders go to {v} only. I ignore every other channel."],
            "context": [("I keep missing my reminders lately.",
                         "Let's fix that. Where should I send them?", "{V}. Only there.")],
            "restate": ["Remember, {v} is the only place I want reminders."],
            "q_kw": ["Which channel should reminders for {who} go to?", "How does {who} want to receive reminders?"],
            "q_para": ["Where should I ping {who} about upcoming deadlines?",
                       "What's the right way to nudge {who} about a task?"],
            "distract": ["Our company is moving all announcements to {o}, what a pain."],
        },
        "zh": {
            "state": ["提醒只发{v}给我，别的渠道都不要。", "重要：以后所有提醒都走{v}，其他地方我不看。"],
            "context": [("最近老是错过提醒。", "那我们改一下，提醒发到哪里比较好？", "{v}，只发{v}。")],
            "restate": ["记住哦，提醒只用{v}。"],
            "q_kw": ["给{who}发提醒应该用什么渠道？", "{who}希望通过哪里收到提醒？"],
            "q_para": ["有截止日期要通知{who}，该发到哪？", "要催{who}做事，用哪个方式联系？"],
            "distract": ["公司要把所有通知都搬到{o}上，真麻烦。"],
        },
    },
    "diet": {
        "kind": "constraint", "flippable": False,
        "en": {
            "state": ["Dietary note: I'm {v}, so keep that in mind for any restaurant suggestions.",
                      "Never suggest food for me without checking — I'm {v}."],
            "context": [("Can you find a place for dinner with a client on Tuesday?",
                         "Sure. Any dietary restrictions I should know about?", "Yes — I'm {v}.")],
            "restate": ["Again, I'm {v}, please double-check menus for me."],
            "q_kw": ["Does {who} have any dietary restrictions?",
                     "What should be checked on menus when booking food for {who}?"],
            "q_para": ["What can't {who} eat?", "Is there anything to avoid when ordering a meal for {who}?"],
            "distract": ["A friend of mine is {o}, so group dinners with her take some planning."],
        },
        "zh": {
            "state": ["饮食提醒：我{v}，推荐餐厅的时候记得注意。", "饮食上我有个忌口：我{v}，给我推荐吃的之前一定要确认。"],
            "context": [("周二要和客户吃饭，帮我找个餐厅。", "好的，你在饮食上有什么忌口吗？", "有，我{v}。")],
            "restate": ["再强调一下，我{v}，点菜的时候帮我留意。"],
            "q_kw": ["{who}在饮食上有什么忌口？", "给{who}推荐餐厅要注意什么？"],
            "q_para": ["{who}有什么不能吃的？", "帮{who}点菜时要避开什么？"],
            "distract": ["我朋友{o}，每次聚餐点菜都特别小心。"],
        },
    },
    "job": {
        "kind": "identity", "flippable": False,
        "en": {
            "state": ["I work as {v} at a mid-sized company.", "Day job: {bare}. Been doing it for about six years."],
            "context": [("Can you help me update my LinkedIn headline?", "Sure! What do you do for work?", "I'm {v}.")],
            "restate": ["Being {v}, my weeks are pretty unpredictable."],
            "q_kw": ["What is {whos} job?", "What does {who} work as?"],
            "q_para": ["What does {who} do for a living?", "What is {whos} profession?"],
            "distract": ["My brother is {o} and he complains about work constantly."],
        },
        "zh": {
            "state": ["我是做{v}的，这份职业干了五六年了。", "我的工作是{v}，在一家中型公司。"],
            "context": [("帮我改一下领英上的简介吧。", "好的！你现在做什么工作？", "{v}。")],
            "restate": ["做{v}这一行，每周都挺不规律的。"],
            "q_kw": ["{who}是做什么工作的？", "{who}现在做什么职业？"],
            "q_para": ["{who}在公司担任什么岗位？", "{who}从事哪一行？"],
            "distract": ["我哥是{o}，天天跟我抱怨工作。"],
        },
    },
    "city": {
        "kind": "identity", "flippable": False,
        "en": {
            "state": ["I live in {v}, have done for about five years now.", "I moved to {v} two years ago and honestly love the city."],
            "context": [("Can you set my calendar to the right time zone?",
                         "Of course. Which city are you based in?", "{V}.")],
            "restate": ["{V} is home for me, so use that time zone for everything."],
            "q_kw": ["Which city does {who} live in?", "What city is {who} in?"],
            "q_para": ["Where is {who} based?", "Which time zone should be used for {who}?"],
            "distract": ["My best friend just moved to {o}, I might visit in the autumn.",
                         "A colleague ran the marathon in {o} last weekend, I'm impressed."],
        },
        "zh": {
            "state": ["我住在{v}，差不多五年了。", "我两年前搬到了{v}，挺喜欢这座城市的。"],
            "context": [("帮我把日历时区设置一下。", "好的，你现在在哪个城市？", "{v}。")],
            "restate": ["我人在{v}，所有时间都按这边的来。"],
            "q_kw": ["{who}住在哪个城市？", "{who}现在住在哪儿？"],
            "q_para": ["{who}的日历时区应该按哪个城市设？", "{who}人在哪座城市？"],
            "distract": ["我最好的朋友刚搬去{o}，我秋天可能去看看她。", "同事上周末去{o}跑了马拉松，太厉害了。"],
        },
    },
    "pet": {
        "kind": "identity", "flippable": False,
        "en": {
            "state": ["I have a {kind} called {pname} — honestly the best pet I've ever had.",
                      "Sorry for the delay, {pname} (my {kind}) decided my keyboard was a bed."],
            "context": [("Can you find me a pet-sitter checklist for next month?",
                         "Sure! What kind of pet do you have?", "A {kind}, {pname}."),
                        ("I need to leave early today.",
                         "No problem. Anything special going on?", "Vet appointment for {pname}, my {kind}.")],
            "restate": ["{Pname} is doing great by the way — still the most spoiled {kind} on the street."],
            "q_kw": ["What pet does {who} have?", "What is the name of {whos} pet?"],
            "q_para": ["Does {who} have any animals at home?", "Who is {pname}?"],
            "distract": ["My neighbour's {o_kind} was making a racket at 6am again.",
                         "A friend just adopted a {o_kind} and keeps sending me photos of it."],
        },
        "zh": {
            "state": ["我家养了一只{kind}，叫{pname}。", "刚才{pname}（我家的{kind}）又闯祸了，把我的耳机线咬断了。"],
            "context": [("下个月出差，想找人帮忙照顾宠物。", "好的，你养的是什么宠物？", "一只{kind}，叫{pname}。"),
                        ("今天得早点回家。", "没问题，有什么事吗？", "要带{pname}去打疫苗，我家{kind}。")],
            "restate": ["{pname}最近挺好的，还是那只被宠坏的{kind}。"],
            "q_kw": ["{who}养了什么宠物？", "{who}家的宠物叫什么名字？"],
            "q_para": ["{who}家里有什么小动物？", "{pname}是谁？"],
            "distract": ["邻居家的{o_kind}一大早又闹腾起来了。", "朋友刚领养了一只{o_kind}，天天给我发照片。"],
        },
    },
    "family": {
        "kind": "identity", "flippable": False,
        "en": {
            "state": ["Family-wise, I have {v}, so my evenings are pretty much spoken for.", "Family update for context: I've got {v}."],
            "context": [("Can you help me plan a realistic evening routine?",
                         "Happy to. Anyone at home I should plan around?", "Yeah, {v}.")],
            "restate": ["As you know, with {v}, weekends are busy too."],
            "q_kw": ["Does {who} have kids?", "What is {whos} family situation?"],
            "q_para": ["Who lives with {who} at home?", "Is {who} a parent?"],
            "distract": ["My sister has {o}, and honestly I don't know how she does it."],
        },
        "zh": {
            "state": ["我家有{v}，下班后基本都在陪孩子。", "补充一下家庭情况：我有{v}。"],
            "context": [("帮我规划一下晚上的时间安排吧。", "好的，家里有没有需要考虑的人？", "有，{v}。")],
            "restate": ["家里有{v}，带孩子周末也挺忙的。"],
            "q_kw": ["{who}有孩子吗？", "{who}的家庭情况是怎样的？"],
            "q_para": ["{who}家里都有谁？", "{who}是不是已经当爸妈了？"],
            "distract": ["我姐有{o}，真不知道她是怎么忙过来的。"],
        },
    },
    "project": {
        "kind": "project", "flippable": False,
        "en": {
            "state": ["I'm building {proj}, {purpose}. The stack is {stack}.",
                      "My current project is called {proj} — it's {purpose}, built on {stack}."],
            "context": [("Can you help me write a README intro?",
                         "Sure! What's the project and what's it built with?", "It's {proj}, {stack}.")],
            "restate": ["{Proj} is coming along nicely — still {stack}, no regrets."],
            "q_kw": ["What tech stack does {proj} use?", "What project is {who} working on?"],
            "q_para": ["What is {who} building at the moment?",
                       "Which technologies is {whos} current project built with?"],
            "distract": ["A friend of mine is rewriting their app on {o_stack}, sounds painful.",
                         "Our sister team named their new service {o_proj}, naming things is hard lol."],
        },
        "zh": {
            "state": ["我最近在做{proj}项目，是一个{purpose}，技术栈是{stack}。",
                      "现在手上的项目叫{proj}，做的是{purpose}，用的{stack}。"],
            "context": [("帮我写个项目 README 的开头吧。", "好的！是哪个项目，用什么技术做的？", "{proj}，{stack}。")],
            "restate": ["{proj}进展挺顺利的，还是{stack}那一套。"],
            "q_kw": ["{proj}项目用的什么技术栈？", "{who}最近在做什么项目？"],
            "q_para": ["{who}手上在忙什么？", "{who}的项目是用哪些技术做的？"],
            "distract": ["朋友他们在用{o_stack}重写应用，听起来挺折腾的。", "隔壁组把新服务命名为{o_proj}，起名真难哈哈。"],
        },
    },
    "trip": {
        "kind": "event", "flippable": False,
        "en": {
            "state": ["I'm flying to {v} on {date} for a week — my first proper holiday this year.",
                      "Booked it! {V} trip, leaving {date}."],
            "context": [("Can you block out some time in my calendar?", "Sure — what's it for?",
                         "Holiday. {V}, leaving {date}.")],
            "q_kw": ["When is {who} travelling to {v}?", "Where is {who} going on holiday?"],
            "q_para": ["When will {who} be away on vacation?", "Which city is {who} visiting on the upcoming trip?"],
            "distract": ["My parents just got back from {o}, they loved it."],
        },
        "zh": {
            "state": ["我{date}要去{v}旅行一周，今年第一次正经休假。", "机票订好了！{date}出发去{v}旅行。"],
            "context": [("帮我在日历上空出几天。", "好的，是要做什么呢？", "休假，{date}去{v}。")],
            "q_kw": ["{who}什么时候去{v}？", "{who}打算去哪里旅行？"],
            "q_para": ["{who}哪天出发去度假？", "{who}这次休假去哪儿？"],
            "distract": ["我爸妈刚从{o}回来，说特别好玩。"],
        },
    },
    "incident": {
        "kind": "event", "flippable": False,
        "en": {
            "state": ["We had a production outage on {date} — the {service} was down for two hours because of {cause}.",
                      "Rough week: on {date} our {service} went down, root cause was {cause}."],
            "context": [("I need to write a postmortem, can you give me a template?", "Of course. What happened?",
                         "The {service} went down on {date}. Root cause: {cause}.")],
            "q_kw": ["What caused the outage {who} mentioned?", "When did {whos} {service} go down?"],
            "q_para": ["Why did {whos} system break recently?", "Has {who} dealt with any incidents at work lately?"],
            "distract": ["Read a blog post about a big company's outage caused by {o_cause}, glad that wasn't us."],
        },
        "zh": {
            "state": ["{date}我们线上出了事故，{service}挂了两个小时，原因是{cause}。",
                      "这周挺惨的：{date}线上{service}宕机，根因是{cause}。"],
            "context": [("我要写一份故障复盘，给个模板吧。", "好的，具体发生了什么？", "{date}{service}挂了，{cause}导致的。")],
            "q_kw": ["{who}说的那次线上事故是什么原因？", "{who}的{service}是哪天出问题的？"],
            "q_para": ["{who}公司最近的故障根源是什么？", "{who}最近处理过什么生产事故？"],
            "distract": ["看到一篇文章，某大厂因为{o_cause}搞出了大故障，还好不是我们。"],
        },
    },
    "purchase": {
        "kind": "event", "flippable": False,
        "en": {
            "state": ["I finally bought {a_item} on {date}!",
                      "Treated myself: picked up {a_item} on {date}, been wanting one for ages."],
            "context": [("Can you remind me to register a warranty?", "Sure — for what?",
                         "The {item} I got on {date}.")],
            "q_kw": ["What has {who} bought recently?", "When did {who} get the {item}?"],
            "q_para": ["Any big purchases {who} made lately?", "What new gear does {who} own?"],
            "distract": ["My flatmate is thinking about getting {o_a_item}, I told him to wait for a sale."],
        },
        "zh": {
            "state": ["我{date}终于下单买了{item}！", "奖励自己一下：{date}入手了{item}，想了好久了。"],
            "context": [("提醒我去登记一下保修。", "好的，是什么东西的保修？", "{date}买的{bare}。")],
            "q_kw": ["{who}最近买了什么？", "{who}是什么时候买的{bare}？"],
            "q_para": ["{who}最近有没有入手什么大件？", "{who}新添了什么装备？"],
            "distract": ["室友在纠结要不要买{o_item}，我让他等打折。"],
        },
    },
}

PREFERENCE_SLOTS = ["prog_lang", "editor", "food", "drink", "meeting_time"]
FLIPPABLE_SLOTS = [s for s in PREFERENCE_SLOTS if SLOTS[s]["flippable"]]
CONSTRAINT_SLOTS = ["no_meeting_day", "answer_format", "reminder_channel", "diet"]
IDENTITY_SLOTS = ["job", "city", "pet", "family"]
WORK_AND_EVENT_SLOTS = ["project", "trip", "incident", "purchase"]
ALL_SLOTS = PREFERENCE_SLOTS + CONSTRAINT_SLOTS + IDENTITY_SLOTS + WORK_AND_EVENT_SLOTS
# Event dates relative to the session that mentions them (days).
EVENT_OFFSETS = {"trip": (14, 60), "incident": (-6, -1), "purchase": (-5, -1)}

# --------------------------------------------------------------------------
# Data model
# --------------------------------------------------------------------------


@dataclass
class Turn:
    role: str
    content: str
    tag: tuple[str, int] | None = None  # ("intro" | "restate" | "flip", fact index)
    noise: bool = False  # chit-chat (greeting, small talk, generic request)


@dataclass
class Fact:
    slot: str
    kind: str
    fields: dict[str, str]
    intro_session: int
    contextual: bool
    restate_session: int | None = None
    flip_session: int | None = None
    new_fields: dict[str, str] | None = None
    message_ids: dict[str, str] = field(default_factory=dict)


@dataclass
class User:
    user_id: str
    name: str
    lang: str
    org_id: str
    agent_id: str
    flips: bool
    session_starts: list[datetime] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    noise_messages: int = 0


# --------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------


def cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def as_fields(value: Any) -> dict[str, str]:
    return dict(value) if isinstance(value, dict) else {"v": value}


def with_caps(fields: dict[str, str]) -> dict[str, str]:
    """Add capitalised variants: {"v": "tacos"} -> also {"V": "Tacos"}."""
    out = dict(fields)
    for key, val in fields.items():
        out[key[:1].upper() + key[1:]] = cap(val)
    return out


def prefixed(fields: dict[str, str], prefix: str) -> dict[str, str]:
    """Fields of another value for distractors: {"kind": "cat"} -> {"o_kind": "cat"}; "v" -> "o"."""
    return {("o" if k == "v" else f"{prefix}{k}"): val for k, val in fields.items()}


def format_date(day: date, lang: str) -> str:
    if lang == "en":
        text = f"{day:%B} {day.day}"
        return text if day.year == YEAR else f"{text}, {day.year}"
    text = f"{day.month}月{day.day}日"
    return text if day.year == YEAR else f"{day.year}年{text}"


def same_value(fields: dict[str, str], option: dict[str, str]) -> bool:
    """True if `fields` (which may carry extras such as a date) is the slot value `option`."""
    return all(fields.get(k) == v for k, v in option.items())


def iso(ts: datetime) -> str:
    return ts.isoformat()


# --------------------------------------------------------------------------
# Planning a user: sessions, facts, distractors
# --------------------------------------------------------------------------


def make_users(rng: random.Random) -> list[User]:
    users: list[User] = []
    names = [("en", n) for n in EN_NAMES] + [("zh", n) for n in ZH_NAMES]
    for idx, (lang, name) in enumerate(names, start=1):
        org = ORGS[(idx - 1) % 2]
        users.append(User(
            user_id=f"u{idx:02d}", name=name, lang=lang, org_id=org,
            agent_id=rng.choice(AGENTS[org]), flips=(idx % FLIP_EVERY == 0),
        ))
    return users


def plan_sessions(rng: random.Random, user: User) -> None:
    """8-14 sessions spread over 6-12 months of the year, ascending."""
    n_sessions = rng.randint(8, 14)
    span_days = min(rng.randint(6, 12) * 30 + rng.randint(0, 5), 363)
    first_day = date(YEAR, 1, 1) + timedelta(days=rng.randint(0, 364 - span_days))
    middle = sorted(rng.sample(range(1, span_days), n_sessions - 2))
    for offset in [0, *middle, span_days]:
        day = first_day + timedelta(days=offset)
        user.session_starts.append(datetime(
            day.year, day.month, day.day, rng.randint(8, 20), rng.randint(0, 59), tzinfo=timezone.utc))


def choose_slots(rng: random.Random, user: User) -> list[str]:
    """5-8 distinct slots covering preference, constraint, identity and project/event."""
    n_facts = rng.randint(5, 8)
    first_pref = rng.choice(FLIPPABLE_SLOTS if user.flips else PREFERENCE_SLOTS)
    chosen = [first_pref, rng.choice(CONSTRAINT_SLOTS), rng.choice(IDENTITY_SLOTS),
              rng.choice(WORK_AND_EVENT_SLOTS)]
    rest = [s for s in ALL_SLOTS if s not in chosen]
    chosen += rng.sample(rest, n_facts - len(chosen))
    return chosen


def choose_values(rng: random.Random, user: User, slots: list[str]) -> dict[str, dict[str, str]]:
    """Pick a consistent value for every slot (diet vs food, language vs project stack)."""
    lang = user.lang
    picked: dict[str, dict[str, str]] = {}
    code_lang = rng.choice(PROG_LANGS)  # also drives the project stack
    diet = rng.choice(VALUES["diet"][lang])
    for slot in ALL_SLOTS:
        if slot == "prog_lang":
            picked[slot] = {"v": code_lang}
        elif slot == "diet":
            picked[slot] = {"v": diet}
        elif slot == "food":
            options = [f for f in VALUES["food"][lang] if f not in DIET_CONFLICTS[diet]]
            picked[slot] = {"v": rng.choice(options)}
        elif slot == "project":
            stack = rng.choice([s for s in STACKS if s[0] == code_lang])
            picked[slot] = {"proj": rng.choice(PROJECT_NAMES[lang]),
                            "purpose": rng.choice(PROJECT_PURPOSES[lang]),
                            "stack": stack[1] if lang == "en" else stack[2]}
        else:
            picked[slot] = as_fields(rng.choice(VALUES[slot][lang]))
    return {s: picked[s] for s in slots}


def pick_session(rng: random.Random, load: list[int], lo: int, hi: int, size: int) -> int:
    """A random session in [lo, hi] with room for `size` more planted messages."""
    lo, hi = max(0, lo), min(len(load) - 1, hi)
    fits = [i for i in range(lo, hi + 1) if load[i] + size <= MAX_PLANTED_LOAD]
    if not fits:
        fits = [i for i in range(len(load)) if load[i] + size <= MAX_PLANTED_LOAD and i >= lo]
    choice = rng.choice(fits) if fits else min(range(lo, hi + 1), key=lambda i: load[i])
    load[choice] += size
    return choice


def plan_facts(rng: random.Random, user: User, load: list[int]) -> None:
    slots = choose_slots(rng, user)
    values = choose_values(rng, user, slots)
    flip_slot = slots[0] if user.flips else None
    n = len(user.session_starts)
    for slot in slots:
        spec = SLOTS[slot]
        contextual = rng.random() < P_CONTEXTUAL
        flips = slot == flip_slot
        restates = (not flips and spec["kind"] != "event" and rng.random() < P_RESTATE)
        latest_intro = n - 3 if flips else (n - 2 if restates else n - 1)
        intro = pick_session(rng, load, 0, latest_intro, 4 if contextual else 2)
        fact = Fact(slot=slot, kind=spec["kind"], fields=values[slot], intro_session=intro, contextual=contextual)
        if restates:
            fact.restate_session = pick_session(rng, load, intro + 1, n - 1, 2)
        if flips:
            fact.flip_session = pick_session(rng, load, intro + 2, n - 1, 2)
            old = values[slot]["v"]
            diet = values.get("diet", {}).get("v")
            options = [v for v in VALUES[slot][user.lang] if v != old
                       and not (slot == "food" and diet and v in DIET_CONFLICTS[diet])]
            fact.new_fields = {"v": rng.choice(options)}
        if spec["kind"] == "event":
            lo_off, hi_off = EVENT_OFFSETS[slot]
            day = user.session_starts[intro].date() + timedelta(days=rng.randint(lo_off, hi_off))
            fact.fields["date"] = format_date(day, user.lang)
        user.facts.append(fact)


# --------------------------------------------------------------------------
# Rendering turns
# --------------------------------------------------------------------------


def fact_block(rng: random.Random, user: User, idx: int, stage: str) -> list[Turn]:
    """Turns for one planted statement: intro (direct or contextual), restatement or flip."""
    fact = user.facts[idx]
    tmpl = SLOTS[fact.slot][user.lang]
    acks = ACKS[user.lang]
    fields = with_caps(fact.fields)
    if stage == "flip":
        assert fact.new_fields is not None
        text = rng.choice(tmpl["flip"]).format(old=fact.fields["v"], new=fact.new_fields["v"])
        return [Turn("user", text, ("flip", idx)), Turn("assistant", rng.choice(acks["flip"]))]
    if stage == "restate":
        text = rng.choice(tmpl["restate"]).format(**fields)
        return [Turn("user", text, ("restate", idx)), Turn("assistant", rng.choice(acks[fact.kind]))]
    if fact.contextual:
        lead, ask, answer = rng.choice(tmpl["context"])
        return [Turn("user", lead), Turn("assistant", ask),
                Turn("user", answer.format(**fields), ("intro", idx)),
                Turn("assistant", rng.choice(acks[fact.kind]))]
    text = rng.choice(tmpl["state"]).format(**fields)
    return [Turn("user", text, ("intro", idx)), Turn("assistant", rng.choice(acks[fact.kind]))]


def other_value(rng: random.Random, user: User, slot: str) -> dict[str, str]:
    """A value for `slot` that is none of the user's own values for it."""
    own = next((f for f in user.facts if f.slot == slot), None)
    taken = [own.fields, own.new_fields] if own else []
    if slot == "project":
        stacks = [s[1] if user.lang == "en" else s[2] for s in STACKS]
        names = PROJECT_NAMES[user.lang]
        if own:
            stacks = [s for s in stacks if s != own.fields["stack"]]
            names = [n for n in names if n != own.fields["proj"]]
        return {"stack": rng.choice(stacks), "proj": rng.choice(names)}
    options = [as_fields(v) for v in VALUES[slot][user.lang]]
    return rng.choice([o for o in options if not any(t and same_value(t, o) for t in taken)])


def distractor_block(rng: random.Random, user: User) -> list[Turn]:
    """A sentence that shares words with a fact slot but states nothing about the user."""
    own_slots = [f.slot for f in user.facts]
    slot = rng.choice(own_slots) if rng.random() < 0.7 else rng.choice(ALL_SLOTS)
    other = other_value(rng, user, slot)
    text = rng.choice(SLOTS[slot][user.lang]["distract"]).format(**prefixed(other, "o_"))
    return [Turn("user", text), Turn("assistant", rng.choice(DISTRACTOR_REPLIES[user.lang]))]


class NoiseDeck:
    """Cycles through a shuffled list of chit-chat exchanges so a user rarely repeats one."""

    def __init__(self, rng: random.Random, lang: str) -> None:
        self.rng = rng
        self.pool = SMALL_TALK[lang] + GENERIC_REQUESTS[lang]
        self.deck: list[tuple[str, str]] = []

    def draw(self) -> list[Turn]:
        if not self.deck:
            self.deck = list(self.pool)
            self.rng.shuffle(self.deck)
        user_text, reply = self.deck.pop()
        return [Turn("user", user_text, noise=True), Turn("assistant", reply, noise=True)]


def greeting(rng: random.Random, lang: str, start: datetime) -> list[Turn]:
    """An opening exchange that fits the weekday and time of day."""
    if start.weekday() == 4 and rng.random() < 0.5:
        text = rng.choice(FRIDAY_GREETINGS[lang])
    else:
        period = "morning" if start.hour < 12 else ("afternoon" if start.hour < 18 else "evening")
        text = rng.choice(GREETINGS[lang]["any"] + GREETINGS[lang][period])
    return [Turn("user", text, noise=True), Turn("assistant", rng.choice(GREETING_REPLIES[lang]), noise=True)]


def assemble_session(rng: random.Random, lang: str, start: datetime, blocks: list[list[Turn]],
                     deck: NoiseDeck) -> list[Turn]:
    """Planted blocks + noise, opened by an optional greeting and closed by optional thanks."""
    load = sum(len(b) for b in blocks)
    target = min(MAX_SESSION_LEN, max(load, rng.choice(SESSION_LENGTHS)))
    spare = target - load
    opener: list[Turn] = []
    closer: list[Turn] = []
    if spare >= 2 and rng.random() < 0.55:
        opener = greeting(rng, lang, start)
        spare -= 2
    if spare >= 2 and rng.random() < 0.45:
        closer = [Turn(role, text, noise=True) for role, text in zip(("user", "assistant"), rng.choice(CLOSERS[lang]), strict=True)]
        spare -= 2
    middle = blocks + [deck.draw() for _ in range(spare // 2)]
    rng.shuffle(middle)
    return opener + [t for block in middle for t in block] + closer


def build_user_history(rng: random.Random, user: User) -> list[dict[str, Any]]:
    plan_sessions(rng, user)
    n = len(user.session_starts)
    load = [0] * n
    plan_facts(rng, user, load)

    blocks: list[list[list[Turn]]] = [[] for _ in range(n)]
    for idx, fact in enumerate(user.facts):
        blocks[fact.intro_session].append(fact_block(rng, user, idx, "intro"))
        if fact.restate_session is not None:
            blocks[fact.restate_session].append(fact_block(rng, user, idx, "restate"))
        if fact.flip_session is not None:
            blocks[fact.flip_session].append(fact_block(rng, user, idx, "flip"))
    for _ in range(rng.randint(3, 5)):
        sid = pick_session(rng, load, 0, n - 1, 2)
        blocks[sid].append(distractor_block(rng, user))

    deck = NoiseDeck(rng, user.lang)
    rows: list[dict[str, Any]] = []
    for s_idx, start in enumerate(user.session_starts):
        turns = assemble_session(rng, user.lang, start, blocks[s_idx], deck)
        user.noise_messages += sum(t.noise for t in turns)
        ts = start
        for m_idx, turn in enumerate(turns, start=1):
            message_id = f"{user.user_id}:s{s_idx + 1:02d}:m{m_idx}"
            if turn.tag is not None:
                stage, f_idx = turn.tag
                user.facts[f_idx].message_ids[stage] = message_id
            rows.append({
                "user_id": user.user_id,
                "session_id": f"{user.user_id}-s{s_idx + 1:02d}",
                "role": turn.role,
                "content": turn.content,
                "created_at": iso(ts),
                "name": user.name if turn.role == "user" else ASSISTANT_NAME,
                "message_id": message_id,
                "org_id": user.org_id,
                "agent_id": user.agent_id,
                "metadata": {"lang": user.lang},
            })
            ts += timedelta(minutes=rng.randint(1, 4))
    return rows


# --------------------------------------------------------------------------
# Questions
# --------------------------------------------------------------------------


def who_fields(rng: random.Random, user: User) -> dict[str, str]:
    if user.lang == "zh":
        who = user.name if rng.random() < 0.65 else "用户"
        return {"who": who, "whos": who}
    if rng.random() < 0.65:
        return {"who": user.name, "whos": f"{user.name}'s"}
    return {"who": "the user", "whos": "the user's"}


def pick_templates(rng: random.Random, keyword: list[str], paraphrase: list[str]) -> list[str]:
    """1-3 questions per fact, mixing keyword-sharing and paraphrased forms."""
    n = rng.choices([1, 2, 3], weights=[3, 5, 2])[0]
    if n == 1:
        return [rng.choice(rng.choice([keyword, paraphrase]))]
    picked = [rng.choice(keyword), rng.choice(paraphrase)]
    rest = [t for t in keyword + paraphrase if t not in picked]
    if n == 3 and rest:
        picked.append(rng.choice(rest))
    return picked


def questions_for_user(rng: random.Random, user: User) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for fact in user.facts:
        tmpl = SLOTS[fact.slot][user.lang]
        if fact.new_fields is not None:
            templates = pick_templates(rng, tmpl["q_flip"][:1], tmpl["q_flip"][1:])
            evidence, kind, fields = [fact.message_ids["flip"]], "flip", fact.new_fields
        else:
            templates = pick_templates(rng, tmpl["q_kw"], tmpl["q_para"])
            evidence = [fact.message_ids["intro"]]
            if "restate" in fact.message_ids:
                evidence.append(fact.message_ids["restate"])
            kind, fields = fact.kind, fact.fields
        for template in templates:
            question = template.format(**with_caps(fields), **who_fields(rng, user))
            out.append({"user_id": user.user_id, "question": question, "evidence": evidence,
                        "org_id": user.org_id, "category": user.lang, "kind": kind})
    return out


# --------------------------------------------------------------------------
# Checks, summary, output
# --------------------------------------------------------------------------


def validate(history: list[dict[str, Any]], questions: list[dict[str, Any]]) -> None:
    by_id = {row["message_id"]: row for row in history}
    assert len(by_id) == len(history), "duplicate message ids"
    sessions: dict[str, list[dict[str, Any]]] = {}
    last_ts: dict[str, str] = {}
    for row in history:
        sessions.setdefault(row["session_id"], []).append(row)
        assert row["created_at"] > last_ts.get(row["user_id"], ""), "timestamps must ascend per user"
        assert row["created_at"].startswith(str(YEAR)), row["created_at"]
        last_ts[row["user_id"]] = row["created_at"]
    for sid, rows in sessions.items():
        assert 4 <= len(rows) <= 10, (sid, len(rows))
        for i, row in enumerate(rows):
            assert row["role"] == ("user" if i % 2 == 0 else "assistant"), sid
    for q in questions:
        assert q["category"] in ("en", "zh") and q["evidence"], q
        for mid in q["evidence"]:
            ev = by_id[mid]
            assert ev["role"] == "user" and ev["user_id"] == q["user_id"], (q, ev)
        assert "{" not in q["question"], q


def summary(users: list[User], history: list[dict[str, Any]], questions: list[dict[str, Any]]) -> str:
    evidence = {mid for q in questions for mid in q["evidence"]}
    sessions = {row["session_id"] for row in history}
    facts = [f for u in users for f in u.facts]
    lines = [
        f"users: {len(users)} ({sum(u.lang == 'en' for u in users)} en, {sum(u.lang == 'zh' for u in users)} zh)",
        f"sessions: {len(sessions)}",
        f"messages: {len(history)} (evidence {len(evidence)}, "
        f"{100 * (1 - len(evidence) / len(history)):.0f}% non-evidence; "
        f"chit-chat noise {100 * sum(u.noise_messages for u in users) / len(history):.0f}%)",
        f"facts: {len(facts)}; contextual {sum(f.contextual for f in facts)}, "
        f"restated {sum(f.restate_session is not None for f in facts)}, "
        f"flipped {sum(f.flip_session is not None for f in facts)}",
        f"questions: {len(questions)}",
    ]
    by_lang_kind = Counter((q["category"], q["kind"]) for q in questions)
    for lang in ("en", "zh"):
        parts = ", ".join(f"{k} {by_lang_kind[(lang, k)]}" for k in
                          ("preference", "constraint", "identity", "project", "event", "flip"))
        lines.append(f"  {lang}: {sum(v for (lg, _), v in by_lang_kind.items() if lg == lang)} ({parts})")
    return "\n".join(lines)


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8", newline="\n") as fh:
        for row in rows:
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")


def generate(seed: int = SEED) -> tuple[list[User], list[dict[str, Any]], list[dict[str, Any]]]:
    rng = random.Random(seed)
    users = make_users(rng)
    history: list[dict[str, Any]] = []
    questions: list[dict[str, Any]] = []
    for user in users:
        history.extend(build_user_history(rng, user))
        questions.extend(questions_for_user(rng, user))
    validate(history, questions)
    return users, history, questions


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out-dir", type=Path, default=Path(__file__).resolve().parent,
                        help="directory for sample_history.jsonl and sample_questions.jsonl (default: examples/)")
    parser.add_argument("--seed", type=int, default=SEED, help=f"random seed (default: {SEED})")
    args = parser.parse_args(argv)
    users, history, questions = generate(args.seed)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(args.out_dir / "sample_history.jsonl", history)
    write_jsonl(args.out_dir / "sample_questions.jsonl", questions)
    print(summary(users, history, questions))


if __name__ == "__main__":
    main()
