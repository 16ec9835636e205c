"""Reading the tasks topic: tasks in their published order, what a group has left, and the online feeder that publishes tasks steered by rewards."""
