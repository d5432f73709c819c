"""Page loaders that run as worker subprocesses inside the UE namespace.

``python -m clawbed.replay.loaders.browser URL`` (headless Chromium through Playwright) and
``python -m clawbed.replay.loaders.h2 URL`` (an httpx HTTP/2 client that fetches the page's
dependency tree as a browser would) each print one :class:`LoadResult` JSON line;
:func:`run_load` starts one in a namespace and parses it; :class:`LoaderWorker` keeps one
running for a series of loads (``--serve``).
"""

from clawbed.replay.loaders.access import ServerAccess
from clawbed.replay.loaders.result import LoadResult, ObjectTiming
from clawbed.replay.loaders.runner import LOADERS, LoaderWorker, run_load

__all__ = ["LOADERS", "LoadResult", "LoaderWorker", "ObjectTiming", "ServerAccess", "run_load"]
