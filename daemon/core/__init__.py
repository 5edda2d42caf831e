"""What every other folder imports: settings, profiles (model and loading), errors, run types (kinds,
phases, outcomes), the host's state, logging and redaction. Imports nothing of the daemon outside
itself."""
