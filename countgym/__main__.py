from countgym.cli import main

raise SystemExit(main())
