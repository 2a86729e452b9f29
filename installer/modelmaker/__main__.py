import sys

from installer.modelmaker import main

sys.exit(main())
