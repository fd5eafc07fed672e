"""The HTTP client, under the main package's name: `from agent_memory.client import MemoryClient`.

It is the `agent_memory_http` package (clients/python, httpx and pydantic only), which the server
ships inside; agents that want only the client install clients/python, the `agent-memory-http`
distribution.
"""

from agent_memory_http import *  # noqa: F403
from agent_memory_http import __all__  # noqa: F401
