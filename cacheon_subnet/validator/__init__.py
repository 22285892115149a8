"""The long-running validator: durable state, fetch, screen, qualify, settle, publish."""
