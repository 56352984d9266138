"""Project checkouts: a plain folder, or a git repository where every run works in its own worktree
and delivers its results as a branch. Talks to git only through its command line (core.checkout.git)."""
