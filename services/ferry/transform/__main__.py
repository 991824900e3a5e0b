from ferry.transform.service import main

main()
