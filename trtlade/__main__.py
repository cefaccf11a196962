from trtlade.cli.main import main

main()
