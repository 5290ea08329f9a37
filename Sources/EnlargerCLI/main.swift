print("enlarger")
