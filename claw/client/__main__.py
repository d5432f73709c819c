"""``python -m clawbed.claw.client``: the CLAW client daemon (see :mod:`.daemon`)."""

import sys

from clawbed.claw.client.daemon import main

sys.exit(main())
