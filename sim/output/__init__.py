"""What a run leaves for a person: the results directory (``results``), the figures
(``plot``), the report (``report``) and the workload API page (``apidoc``)."""
