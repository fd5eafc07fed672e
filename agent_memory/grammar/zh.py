"""Chinese: who speaks, someone of the user's, changes of mind, corrections (see `agent_memory.grammar`)."""

from __future__ import annotations

from agent_memory.grammar import entry, table

# "日语先不学了", "Vue 基本不碰了": a habit dropped, its object said first, the speaker left out.
_NO_MORE = r"(?:基本|已经|早就|都|也|就|先|暂时|再也)?不(?:碰|用|喝|吃|玩|看|去|学|练|跑|坐|开)了"

ZH = table(
    # -- who speaks ------------------------------------------------------------------------------
    # Another person or thing as subject.
    entry("speaker.other", r"^(?:你|他|她|它|这|那|今天|天气|外面|楼下|楼上|隔壁|对面)", anchored=True,
          examples=("你说得对", "他是老师", "天气不错"), counterexamples=("我是老师", "每天跑步")),
    # Others as a group, after any word of when: "现在大家轮流选", "最近他们都…".
    entry("speaker.group", r"^(?:现在|最近|后来|以后|平时)?(?:大家|他们|她们|别人|人家|其他人)(?!都?(?:叫|喊|称呼)我)",
          anchored=True,
          examples=("现在大家轮流选", "他们都去了"), counterexamples=("大家都叫我小王", "我们去了")),
    # Chinese drops the subject: a clause that says when or how often, or how things changed, is
    # the speaker's when nobody else is named.
    entry("speaker.self_marks",
          r"^.{0,3}?(?:现在|已经|一直|每天|每周|每个月|平时|一般|经常|上个月|上周|去年|最近|以后|从来|后来|"
          r"不再|戒了|换成|改成|换了|搬到|离职|开了|只喝|只吃|只用|偶尔|改(?:坐|学|喝|吃|去|住|玩|看|骑|开|穿|练|打|用))",
          examples=("现在只喝美式", "已经戒了奶茶", "每天跑五公里"), counterexamples=("天气不错", "他是老师")),
    # Where the user is, what their home has, or what of theirs is still where it was: "坐标长沙",
    # "人在深圳", "家里有一对双胞胎", "生活的还在印象笔记里" (a part of theirs named with 的).
    entry("speaker.still_mine", r"^(?:坐标|人在|家里(?=有|养))|^(?:[^，。]{1,4}的)?(?:还在|仍在)", anchored=True,
          examples=("坐标长沙", "人在深圳", "家里有一对双胞胎儿子", "生活的还在印象笔记里"),
          counterexamples=("快递还在路上", "家里人都好")),
    # What the user speaks about, said before them: "工作那部分我已经挪到飞书文档了".
    entry("speaker.topic_first", r"^(?![你他她它这那])[^，。你他她它]{1,6}?(?<![跟给对和帮让叫被把向替陪请])我"
          r"(?:已经|一般|每天|都|也|还|就|平时|现在|会|要|不|没)", anchored=True,
          examples=("工作那部分我已经挪到飞书文档了", "咖啡我每天都喝"), counterexamples=("他我不认识", "妈妈给我买了")),
    # What someone says of the user is the user's: "医生说我血糖偏高"; so is what someone did to the
    # user's situation: "公司给换了 ThinkPad".
    entry("speaker.reported_self", r"^(?:医生|大夫|体检|检查|报告|营养师)[^，。我]{0,3}(?:说|讲|显示|发现)我"
          r"|^(?:公司|单位|学校|部门|领导)[^，。我]{0,3}(?:刚|已经)?给我?(?:换|调|安排|配)了", anchored=True,
          examples=("医生说我血糖偏高", "公司刚给换了 ThinkPad"), counterexamples=("医生很忙", "公司在上海")),
    # When, said before the speaker: "下周五（11月8号）我要飞新加坡", "明年我打算…".
    entry("speaker.time_lead", r"^(?:(?:下|上|这|本)(?:个)?(?:周|星期|礼拜|月)[一二三四五六日天末]?|明天|后天|今年|明年|周末|"
          r"月底|年底|[0-9一二三四五六七八九十]+月[0-9一二三四五六七八九十]+[号日]|[（(][^）)]{0,12}[）)]|\s)+", anchored=True,
          examples=("下周五（11月8号）我要飞新加坡", "明年我打算考研"), counterexamples=("我明年考研",)),
    # -- someone of the user's ----------------------------------------------------------------------
    # Named or aged: "我女儿叫朵朵", "我爸今年六十五".
    entry("relative.named", r"^我(?:的|家)?\w{1,3}?(?:叫|名叫|今年|刚满|[0-9一二三四五六七八九十两]+岁)", anchored=True,
          examples=("我女儿叫朵朵", "我爸今年六十五", "我儿子5岁"), counterexamples=("我叫小王", "我喜欢猫")),
    # -- changes of mind ----------------------------------------------------------------------------
    # Strong: it takes back what was said.
    entry("change.strong", r"不再|已经不|不[^，。]{1,8}了|戒了|退了|挪到|换成|改成|改用|换到|转到|算了|离职|搬到|搬过去|换工作|"
          r"改(?:坐|学|喝|吃|去|住|玩|看|骑|开|穿|练|打)|卖了|卖掉了|不用[^，。]{1,8}了",
          examples=("我不再喝咖啡", "戒了奶茶", "还是算了", "写代码我不用VS Code了"), counterexamples=("我喝咖啡", "我用 Mac")),
    # Weak: what holds from now on.
    entry("change.weak", r"以后都|现在|最近|能接受|开始",
          examples=("以后都用中文回答", "现在只喝美式", "最近在学日语"), counterexamples=("我喝美式",)),
    # The old value a change of mind names ("坚持不下去了" says it could not go on, not what it no
    # longer does).
    entry("change.old", r"(?:不再|已经不|不(?!下去|起|动|到|住|过|完))(?:喜欢)?(?:用|喝|吃|玩|做|学|去|住|坐|选)?"
          r"(?P<old>[^，。；！？了]{2,14})了|戒了(?P<old2>[^，。；！？]{1,8})"
          r"|从(?P<old3>[^，。；！？]{1,12}?)(?:换成|改成|换到|转到|改用|切换到|搬到)"
          # The object said first: "Vue 基本不碰了", "奶茶已经不喝了".
          r"|(?:^|[，,\s])(?P<old4>[A-Za-z][\w+#.]*|[^，。；！？\s]{2,6}?)\s*" + _NO_MORE,
          examples=("戒了奶茶", "从VS Code换成Helix", "奶茶已经不喝了", "我不再喜欢喝咖啡了"),
          counterexamples=("我喝奶茶", "坚持不下去了")),
    entry("change.dropped_habit", r"^[^，。]{1,8}?" + _NO_MORE, anchored=True,
          examples=("日语先不学了", "Vue 基本不碰了"), counterexamples=("我不学日语",)),
    # Something that happened once: "昨天入手了一台相机".
    entry("change.event", r"(?:昨天|前天|上周|上个月|去年|那天|刚才|上次)[^，。]{0,12}了",
          examples=("昨天入手了一台相机", "上周去了趟杭州"), counterexamples=("我每天跑步",)),
    # How often: a habit ("我下班一般打车").
    entry("change.habit", r"一般|平时|通常|总是|经常|每天|每周|每晚|每次|习惯",
          examples=("我下班一般打车", "每天跑五公里"), counterexamples=("我打车",)),
    # -- corrections said on the spot -----------------------------------------------------------------
    # "周三，不对，周四": the cue, a clause of its own.
    entry("correction.cue", r"^[哦啊呃噢额]?(?:不对|哦不|不是|说错了|打错了|错了|口误)[\s，,！!。—–-]*$", anchored=True,
          examples=("不对，", "哦不对", "说错了。"), counterexamples=("不对劲", "不是我")),
)
