"""The HTTP client, under the main package's name: `from agent_memory.client import MemoryClient`.

It is the `agent-memory-client` distribution (clients/python, httpx and pydantic only), which
an agent can install without the server's stack; the server installs it too.
"""

from agent_memory_client import *  # noqa: F403
from agent_memory_client import __all__  # noqa: F401
