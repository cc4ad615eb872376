from neuronc.cli import main

main()
