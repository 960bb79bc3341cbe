// DBusKit module.
