"""countgym's task package for lmms-eval: the YAML template and the hooks (``utils.py``) that
``python -m countgym.integrations.lmms_tasks`` copies next to the prepared data."""
