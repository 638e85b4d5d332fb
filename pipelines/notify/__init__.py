"""Reminders that reach a person: message composition (pure), transports (SMTP, chat webhook) and the
reminders sent when the outbox delivers a remind step."""
