from ferry.extract.service import main

main()
