import sys

from countgym.integrations.lmms_tasks import main

sys.exit(main())
