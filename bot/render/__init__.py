"""What the bot posts: Block Kit, text, plans, forms and widgets."""
