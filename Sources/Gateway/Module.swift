// Gateway module.
