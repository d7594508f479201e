"""``python -m airflow_provider_dws.emulator`` runs the ``dws-emulator`` CLI."""

import sys

from .cli import main

sys.exit(main())
