from ferry.load.service import main

main()
