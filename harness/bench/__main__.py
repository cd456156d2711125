from harness.bench.driver import main

raise SystemExit(main())
