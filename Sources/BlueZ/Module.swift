// BlueZ module.
