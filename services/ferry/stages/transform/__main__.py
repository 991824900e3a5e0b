from ferry.stages.transform.service import main

main()
