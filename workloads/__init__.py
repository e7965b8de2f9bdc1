"""What a job runs with besides its image and command: the lab's data sources (datasets, shared and
department volumes, checkpoint storage) and department secrets. Declared by admins, scoped by the tenancy
gate, and resolved into values the cluster backends turn into volumes and environment."""
