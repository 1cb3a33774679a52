"""Stand-in for the ``skyrl`` package (SkyRL a9564572); see train.config and train.generators."""
