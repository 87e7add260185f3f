"""The inference fleet: replicas that follow a model's channels on ``models.channels`` (hash
check, atomic hot swap, stable canary routing by user, acks on ``models.acks``), and the HTTP app
a serving replica runs (`flywheel serve`). It stands on the model registry's contracts and the
policy definitions; it never imports the learner."""
