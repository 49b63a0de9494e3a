"""Load drivers the harness runs next to chaos. Nothing here imports Locust or Ray at import
time: Locust loads run as a subprocess (:mod:`raychaos.loads.locust_runner`), Ray loads as jobs
(the scripts in the repository's ``loads/``)."""
