"""Where runs live: files under CREWAGENT_HOME, or Postgres for replicas."""
