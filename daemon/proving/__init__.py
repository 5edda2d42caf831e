"""Is this engine right: the known answer recorded after a cold start and compared after every wake, and
the proof that a sleep gave the GPU memory back. Used by switching and parking alike."""
