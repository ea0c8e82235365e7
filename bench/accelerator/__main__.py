import sys

from bench.accelerator.run import main

sys.exit(main())
