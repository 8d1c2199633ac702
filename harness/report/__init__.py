"""Tables and plots, built from results files only (never by re-running agents)."""
