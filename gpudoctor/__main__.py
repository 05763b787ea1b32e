from gpudoctor.cli import main

raise SystemExit(main())
