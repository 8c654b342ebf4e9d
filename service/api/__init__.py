"""The HTTP face: thin handlers over the store and the lifecycle."""
