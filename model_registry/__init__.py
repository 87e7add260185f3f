"""The model registry: versions' histories on ``models.versions``, channel pointers on
``models.channels``, content-addressed artifacts under ``models/<model>/<version>/``, and the
canary's online evidence that decides promotion or rollback (DESIGN §4, §8). The learner
registers and promotes through it; the inference fleet follows its channels."""
