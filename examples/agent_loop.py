"""An agent that remembers: recall before each answer, log the turn after.

    pip install ./clients/python openai
    python examples/agent_loop.py --user-id u1 --session-id s1

The memory service is found through AGENT_MEMORY_URL and AGENT_MEMORY_API_KEY (or --memory-url and
--api-key); the chat model through the variables the server itself reads for its LLM:
AGENT_MEMORY_LLM_BASE_URL, AGENT_MEMORY_LLM_API_KEY and AGENT_MEMORY_LLM_MODEL (or --llm-base-url,
--llm-api-key and --model). Any OpenAI-compatible endpoint works: OpenAI, vLLM, Ollama, ...

Each turn reads the context block of `POST /v1/context` (the memories that answer the message, a
summary of the session's older turns and its recent ones), puts it in the system prompt, and logs
the exchange with `POST /v1/conversations`, from which the server learns new memories in the
background. The model sees no history but that block, so the session survives a restart of this
script and the prompt stays within `--context-tokens`.
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid

import openai
from agent_memory_http import AgentMemoryError, MemoryClient

SYSTEM = """You are a helpful assistant with a long-term memory of the user.
Answer in the language of the user's message. Use what you remember when it is relevant, and do
not claim to remember anything that is not below.

What you remember about the user and this conversation:
{context}"""


def answer(
    memory: MemoryClient, llm: openai.OpenAI, model: str, user_id: str, session_id: str, message: str,
    *, context_tokens: int = 1000,
) -> str:
    """One turn of the agent: recall what bears on `message`, answer it, and log the exchange."""
    context = memory.context(user_id, query=message, session_id=session_id, max_tokens=context_tokens)
    completion = llm.chat.completions.create(model=model, messages=[
        {"role": "system", "content": SYSTEM.format(context=context.text or "(nothing yet)")},
        {"role": "user", "content": message},
    ])
    reply = completion.choices[0].message.content or ""
    memory.log_conversation(user_id, session_id, [
        {"role": "user", "content": message},
        {"role": "assistant", "content": reply},
    ])
    return reply


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(description="Chat with an LLM that remembers, through agent-memory.")
    parser.add_argument("--user-id", required=True, help="whose memories to recall and extend")
    parser.add_argument("--session-id", default=None, help="the conversation to continue (default: a new one)")
    parser.add_argument("--memory-url", default=None, help="the agent-memory service (default: $AGENT_MEMORY_URL)")
    parser.add_argument("--api-key", default=None, help="its API key (default: $AGENT_MEMORY_API_KEY)")
    parser.add_argument("--llm-base-url", default=env("AGENT_MEMORY_LLM_BASE_URL"),
                        help="an OpenAI-compatible API (default: $AGENT_MEMORY_LLM_BASE_URL, else OpenAI's)")
    parser.add_argument("--llm-api-key", default=env("AGENT_MEMORY_LLM_API_KEY") or env("OPENAI_API_KEY"),
                        help="its key (default: $AGENT_MEMORY_LLM_API_KEY, else $OPENAI_API_KEY)")
    parser.add_argument("--model", default=env("AGENT_MEMORY_LLM_MODEL"),
                        help="the chat model (default: $AGENT_MEMORY_LLM_MODEL)")
    parser.add_argument("--context-tokens", type=int, default=1000, help="the size of the context block")
    args = parser.parse_args(argv)
    if not args.model:
        parser.error("name the chat model with --model or AGENT_MEMORY_LLM_MODEL")
    return args


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    session_id = args.session_id or f"chat-{uuid.uuid4().hex[:12]}"
    # Local servers (vLLM, Ollama) take any key, but the openai package insists on one.
    llm = openai.OpenAI(base_url=args.llm_base_url, api_key=args.llm_api_key or "not-needed")
    print(f"session {session_id}; an empty line or Ctrl-D ends it", file=sys.stderr)
    with MemoryClient(args.memory_url, args.api_key) as memory:
        while True:
            try:
                message = input("you> ").strip()
            except EOFError:
                break
            if not message:
                break
            try:
                print(answer(memory, llm, args.model, args.user_id, session_id, message,
                             context_tokens=args.context_tokens))
            except (AgentMemoryError, openai.OpenAIError) as exc:
                print(f"error: {exc}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
